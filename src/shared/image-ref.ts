import { ApiError } from '../errors.ts'
import { ImageReferenceError, parseImageReference } from '../images/image-reference.ts'

/**
 * Checks an image reference a caller wrote (at `field`) before anything is stored: a malformed one
 * is a 400 naming the field and what is wrong, never a workspace that fails later. Returns it as
 * written: the session shows the reference it was given.
 */
export function checkImageRef(ref: string, field: string): string {
  try {
    parseImageReference(ref)
    return ref
  } catch (err) {
    if (err instanceof ImageReferenceError) throw new ApiError('invalid_request', `${field}: ${err.message}.`)
    throw err
  }
}
