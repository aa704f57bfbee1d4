/**
 * A tool result with images, as the model is sent it: text and image parts in order (MCP results,
 * screenshots). A result without images is plain text.
 */
export type ResultPart = { type: 'text'; text: string } | { type: 'file'; data: { type: 'data'; data: string }; mediaType: string }
