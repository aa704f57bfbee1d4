/** The text of a message's content on either wire: a string, or the text parts of an array joined by `sep`. */
export const textOf = (content: unknown, sep = ''): string =>
  typeof content === 'string'
    ? content
    : Array.isArray(content)
      ? content.filter((p) => p?.type === 'text' && typeof p.text === 'string').map((p) => p.text as string).join(sep)
      : ''
