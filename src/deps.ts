import type { Config } from './config.ts'
import type { Store } from './db/database.ts'
import type { EventBus } from './events/event-bus.ts'
import type { SecretBox } from './shared/secret-box.ts'
import type { WorkspaceManager } from './workspaces/workspace-manager.ts'
import type { TurnRunner } from './runner/turn-runner.ts'
import type { BlobStore } from './artifacts/blob-store.ts'
import type { PreviewGateway } from './previews/preview-gateway.ts'
import type { ServiceNode } from './nodes/node.ts'
import type { Metrics } from './shared/metrics.ts'
import type { HostReport } from './sandbox/sandbox.ts'

/**
 * What a domain's routes may be handed. Each plugin uses only the parts it needs. `host` is what
 * the sandbox provider says of this host (the start-up report; probed once, then kept).
 */
export type Deps = { store: Store; bus: EventBus; config: Config; box: SecretBox; workspaces: WorkspaceManager; runner: TurnRunner; node: ServiceNode; blobs: BlobStore; previews: PreviewGateway; metrics: Metrics; host: () => HostReport }
