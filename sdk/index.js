// A client of Warren's public API: openapi-fetch over the types generated from the service's own
// description (schema.d.ts; `node scripts/generate-sdk.ts` in the repository rewrites it). Plain
// JavaScript, so that it runs from node_modules without a build.
import createFetchClient from 'openapi-fetch'

/** @param {import('./index.d.ts').ClientOptions} options */
export function createClient({ baseUrl, token, source, fetch }) {
  const headers = { authorization: `Bearer ${token}` }
  // Names where a request comes from (a session created with it records `source`).
  if (source) headers['X-Warren-Source'] = source
  return createFetchClient({ baseUrl: baseUrl.replace(/\/+$/, ''), headers, ...(fetch ? { fetch } : {}) })
}
