/** JSON columns are text on both dialects; these keep the parse/stringify in one place. */
export const toJson = (value: unknown): string => JSON.stringify(value)
export const fromJson = <T>(text: string | null | undefined, fallback: T): T =>
  text === null || text === undefined || text === '' ? fallback : (JSON.parse(text) as T)
