/** Every scope a token can carry (decisions §1). Reads need `:read`, changes need `:write`. */
export const SCOPES = [
  'sessions:read',
  'sessions:write',
  'agents:read',
  'agents:write',
  'webhooks:read',
  'webhooks:write',
  'models:read',
  'models:write',
  'environments:read',
  'environments:write',
  'usage:read',
  'tokens:write',
] as const
export type Scope = (typeof SCOPES)[number]

export const TOKEN_PREFIX = 'svc_pat_'
export const TOKEN_LIFETIMES_DAYS = [7, 30, 90] as const
