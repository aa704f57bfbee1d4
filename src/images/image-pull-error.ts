/**
 * Why an image could not be pulled, as one of a few reasons a caller (a workspace's
 * `workspace.recovery_failed`, a test) can tell apart, with a message that names the image and
 * never a credential.
 */
export type ImagePullReason =
  /** The reference cannot be pulled as written. */
  | 'malformed_reference'
  /** The registry has no such repository, tag or digest. */
  | 'not_found'
  /** The registry refused the credentials, or wants some and none were given. */
  | 'unauthorized'
  /** The deployment's registry address policy refuses the registry (or a redirect's target). */
  | 'refused_address'
  /** Bytes that do not hash to the digest that names them. */
  | 'digest_mismatch'
  /** A manifest, config or layer past its ceiling, or longer than its descriptor says. */
  | 'too_large'
  /** A layer entry that would leave its folder, a device node, a hard link to nothing. */
  | 'unsafe_layer'
  /** No manifest for this host's platform, a media type or compression this client does not read. */
  | 'unsupported'
  /** The registry answered with something that is not the protocol: bad JSON, an unexpected status. */
  | 'registry_error'
  /** The registry could not be reached, or went silent past the idle timeout. */
  | 'unreachable'

export class ImagePullError extends Error {
  readonly reason: ImagePullReason
  constructor(reason: ImagePullReason, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'ImagePullError'
    this.reason = reason
  }
}
