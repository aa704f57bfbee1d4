/** Single-quotes for sh: safe for every byte but NUL (refused earlier). */
export function quote(s: string): string {
  return `'${s.replace(/'/g, `'"'"'`)}'`
}
