import { inspect } from 'node:util'

/**
 * A user name and password (or token) for one registry. Kept in private fields, and shown as
 * "[credentials]" by JSON.stringify, util.inspect and String(), so that logging a pull's options or
 * an error that carries them never writes the secret.
 */
export class RegistryCredentials {
  readonly #username: string
  readonly #password: string
  constructor(username: string, password: string) {
    this.#username = username
    this.#password = password
  }
  /** The Basic authorization header value, for the registry or its token server only. */
  basic(): string {
    return `Basic ${Buffer.from(`${this.#username}:${this.#password}`).toString('base64')}`
  }
  toJSON(): string {
    return '[credentials]'
  }
  toString(): string {
    return '[credentials]'
  }
  [inspect.custom](): string {
    return '[credentials]'
  }
}
