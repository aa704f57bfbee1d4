/**
 * The description with every `$ref` to a named shape replaced by the shape itself, for checks that
 * read a shape through the operations using it. The shapes hold no cycle, so the copy is finite.
 */
export function inlineRefs<T>(doc: T): T {
  const schemas = (doc as { components?: { schemas?: Record<string, unknown> } }).components?.schemas ?? {}
  const walk = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(walk)
    if (typeof node !== 'object' || node === null) return node
    const ref = (node as { $ref?: unknown }).$ref
    if (typeof ref === 'string' && ref.startsWith('#/components/schemas/')) return walk(schemas[ref.slice('#/components/schemas/'.length)])
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, walk(v)]))
  }
  return walk(doc) as T
}
