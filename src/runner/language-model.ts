import { createAnthropic } from '@ai-sdk/anthropic'
import { createOpenAI } from '@ai-sdk/openai'
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import type { LanguageModel } from 'ai'
import type { CredentialRecord } from '../models/models.store.ts'
import type { ProviderFetch } from './provider-fetch.ts'

/**
 * The AI SDK model for a connection. Called from the service only: the key never enters a
 * workspace. OpenAI is spoken through chat completions, the same wire as every
 * OpenAI-compatible server, so one protocol serves both. `fetch` is the runner's providerFetch:
 * every call goes through the outbound policy.
 */
export function languageModel(credential: CredentialRecord, apiKey: string, model: string, fetch: ProviderFetch): LanguageModel {
  switch (credential.provider) {
    case 'openai':
      return createOpenAI({ apiKey, baseURL: credential.baseUrl, fetch }).chat(model)
    case 'anthropic':
      return createAnthropic({ apiKey, baseURL: credential.baseUrl, fetch })(model)
    case 'openai_compatible':
      return createOpenAICompatible({ name: 'openai_compatible', apiKey, baseURL: credential.baseUrl, includeUsage: true, fetch })(model)
    default:
      throw new Error(`Unknown model provider "${credential.provider}"`)
  }
}

/** Context windows of well-known model families; anything else gets a conservative default. */
const WINDOWS: [RegExp, number][] = [
  [/^claude-/, 200_000],
  [/^gpt-4\.1/, 1_000_000],
  [/^gpt-5/, 400_000],
  [/^(gpt-4o|o1|o3|o4)/, 128_000],
]
export const DEFAULT_CONTEXT_WINDOW = 128_000

export function contextWindow(model: string, configured: number): number {
  if (configured > 0) return configured
  return WINDOWS.find(([re]) => re.test(model))?.[1] ?? DEFAULT_CONTEXT_WINDOW
}

/**
 * The output ceiling to ask for, when Warren must choose one: Anthropic requires `max_tokens`, and
 * the SDK knows the right value only for the Claude models it was built with.
 */
export function maxOutputTokens(provider: string, model: string): number | undefined {
  return provider === 'anthropic' && !/^claude-/.test(model) ? 8192 : undefined
}
