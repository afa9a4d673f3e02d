"""Vocabulary for the synthetic dataset: engineering topics with their code identifiers, file
paths and labels, and the sentence templates issues, MRs and notes are assembled from.

The point is realistic retrieval material: exact identifiers (snake_case, camelCase,
CONSTANT_CASE), paths and cross-references a search engine must find, mixed with prose.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Topic:
    name: str
    component: str
    things: tuple[str, ...]
    idents: tuple[str, ...]
    files: tuple[str, ...]
    symptoms: tuple[str, ...]
    labels: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic("auth", "authentication",
          ("login flow", "session token", "OAuth callback", "password reset", "SSO integration",
           "2FA enrollment", "refresh token rotation", "SAML assertion", "personal access tokens"),
          ("validate_session_token", "refreshAccessToken", "SESSION_TTL_SECONDS", "oauth_state_nonce",
           "verifyJwtSignature", "MAX_LOGIN_ATTEMPTS", "user_session_id", "TokenRevocationService"),
          ("src/auth/login.ts", "src/auth/session.py", "app/services/oauth_callback.rb",
           "lib/auth/token_store.go", "src/auth/middleware.ts", "config/initializers/saml.rb"),
          ("users are logged out after a few minutes", "the OAuth callback returns a 500",
           "refresh tokens are never rotated", "login hangs on the SSO redirect",
           "2FA codes are rejected when the clock drifts"),
          ("auth", "security", "backend")),
    Topic("caching", "caching layer",
          ("Redis cache", "CDN invalidation", "query cache", "HTTP cache headers", "fragment cache",
           "cache warmup job", "etag handling"),
          ("cache_key_for", "invalidateProjectCache", "CACHE_TTL_MS", "redis_pool_size",
           "getOrSetCached", "STALE_WHILE_REVALIDATE", "CacheWarmupWorker"),
          ("src/cache/redis_client.py", "lib/cache/keys.go", "app/models/concerns/cacheable.rb",
           "src/cache/invalidate.ts", "config/redis.yml"),
          ("stale data is served after an update", "the cache hit rate dropped to 40%",
           "Redis memory keeps growing", "cache keys collide between tenants"),
          ("caching", "performance", "backend")),
    Topic("database", "database",
          ("migration", "connection pool", "slow query", "index on merge_requests", "partitioned table",
           "replica lag", "deadlock", "N+1 query"),
          ("add_index_concurrently", "fetchUserBatch", "DB_POOL_TIMEOUT", "lock_timeout_ms",
           "with_replica_fallback", "MAX_BATCH_SIZE", "BackgroundMigrationJob", "pg_stat_statements"),
          ("db/migrate/20250114_add_index_on_notes.rb", "src/db/pool.py", "lib/db/queries.go",
           "app/finders/issues_finder.rb", "src/db/repository.ts"),
          ("the migration times out on large instances", "a deadlock shows up under load",
           "queries hit the primary instead of the replica", "the connection pool is exhausted"),
          ("database", "backend", "performance")),
    Topic("ci", "CI pipeline",
          ("CI pipeline", "flaky spec", "Docker build", "test sharding", "artifact upload", "runner cache",
           "lint job", "coverage report"),
          ("retry_flaky_jobs", "parallelTestShards", "CI_JOB_TIMEOUT", "artifact_expire_in",
           "buildDockerImage", "COVERAGE_THRESHOLD", "junit_report_path"),
          (".gitlab-ci.yml", "scripts/ci/run_tests.sh", "ci/templates/build.yml", "Dockerfile",
           "spec/support/retry_helper.rb", "tools/ci/shard_tests.py"),
          ("the pipeline takes over 40 minutes", "a spec fails intermittently on main",
           "the Docker build runs out of disk", "coverage is not reported on merge requests"),
          ("ci", "tooling", "flaky-test")),
    Topic("deployment", "deployment",
          ("canary deploy", "Helm chart", "rollback procedure", "feature flag rollout", "blue/green switch",
           "Kubernetes readiness probe", "Terraform module"),
          ("deploy_canary", "rollbackRelease", "READINESS_TIMEOUT_SECONDS", "helm_values_override",
           "featureFlagEnabled", "MAX_SURGE_PERCENT", "release_manifest"),
          ("deploy/helm/values.yaml", "deploy/k8s/deployment.yaml", "infra/terraform/main.tf",
           "scripts/deploy/rollback.sh", "src/flags/feature_flags.ts"),
          ("the canary never receives traffic", "pods restart in a loop after the upgrade",
           "the rollback leaves old config behind", "a feature flag is evaluated before it is loaded"),
          ("deployment", "infrastructure", "devops")),
    Topic("api", "REST API",
          ("pagination", "rate limiting", "webhook delivery", "API versioning", "GraphQL resolver",
           "error responses", "bulk endpoint"),
          ("paginate_with_cursor", "handleWebhookRetry", "API_RATE_LIMIT_PER_MINUTE", "serialize_issue",
           "resolveMergeRequests", "MAX_PER_PAGE", "ApiErrorFormatter"),
          ("src/api/routes/issues.ts", "app/api/v4/projects.rb", "lib/api/pagination.go",
           "src/api/webhooks.py", "src/graphql/resolvers/merge_requests.ts"),
          ("the Link header points at the wrong host", "webhooks are delivered twice",
           "the endpoint returns 500 for an empty page", "x-total is missing on large lists"),
          ("api", "backend")),
    Topic("ui", "web UI",
          ("issue sidebar", "merge request widget", "dark mode", "markdown preview", "diff viewer",
           "dropdown filter", "notification settings page"),
          ("renderMarkdownPreview", "useIssueSidebar", "DEFAULT_THEME", "diff_viewer_mode",
           "MergeRequestWidget", "onFilterChange", "MAX_VISIBLE_LABELS"),
          ("src/ui/components/IssueSidebar.vue", "src/ui/diff/DiffViewer.tsx", "app/assets/stylesheets/dark.scss",
           "src/ui/hooks/useFilters.ts", "src/ui/markdown/preview.ts"),
          ("the sidebar flickers when labels change", "dark mode loses contrast in code blocks",
           "the diff viewer freezes on large files", "the dropdown closes on scroll"),
          ("frontend", "ux")),
    Topic("performance", "performance",
          ("page load time", "memory usage", "background job latency", "search indexing", "N+1 rendering",
           "p95 latency", "CPU spikes"),
          ("measure_latency", "preloadAssociations", "WORKER_CONCURRENCY", "gc_compact_interval",
           "batchLoadNotes", "P95_BUDGET_MS", "profile_request"),
          ("src/perf/tracing.py", "lib/workers/pool.go", "app/workers/index_worker.rb",
           "src/perf/metrics.ts", "config/puma.rb"),
          ("p95 latency doubled after the last release", "workers leak memory overnight",
           "indexing falls hours behind", "the dashboard takes 9 seconds to load"),
          ("performance", "backend")),
    Topic("billing", "billing",
          ("invoice generation", "Stripe webhook", "seat count", "trial expiry", "usage quotas",
           "proration", "tax calculation"),
          ("calculate_proration", "syncStripeSubscription", "TRIAL_LENGTH_DAYS", "invoice_line_items",
           "applyUsageQuota", "SEAT_OVERAGE_RATE", "BillingReconciler"),
          ("src/billing/invoices.py", "app/services/billing/stripe_webhook.rb", "src/billing/quota.ts",
           "lib/billing/tax.go", "src/billing/seats.py"),
          ("customers are charged twice", "the trial expires a day early",
           "seat counts drift from the license", "invoices miss the tax line"),
          ("billing", "customer", "backend")),
    Topic("notifications", "notifications",
          ("email digest", "push notification", "mention notifications", "Slack integration",
           "notification preferences", "unsubscribe link"),
          ("send_digest_email", "enqueueNotification", "DIGEST_BATCH_SIZE", "slack_webhook_url",
           "shouldNotifyUser", "MAX_MENTIONS_PER_NOTE", "NotificationDispatcher"),
          ("src/notifications/email.py", "app/mailers/notify.rb", "src/notifications/slack.ts",
           "lib/notify/dispatcher.go", "app/views/notify/digest.html.haml"),
          ("digests are sent at midnight UTC instead of local time", "mentions notify disabled users",
           "Slack messages are truncated", "the unsubscribe link returns 404"),
          ("notifications", "backend")),
    Topic("search", "search",
          ("search index", "fuzzy matching", "advanced search syntax", "Elasticsearch reindex",
           "result ranking", "autocomplete"),
          ("reindex_project", "buildSearchQuery", "SEARCH_RESULTS_LIMIT", "tokenize_identifier",
           "rankResults", "MIN_QUERY_LENGTH", "SearchIndexer"),
          ("src/search/indexer.py", "lib/search/query.go", "app/services/search/global_service.rb",
           "src/search/autocomplete.ts", "config/elasticsearch.yml"),
          ("exact identifiers do not match", "the reindex never finishes",
           "results ignore the project filter", "autocomplete suggests deleted branches"),
          ("search", "backend")),
    Topic("observability", "observability",
          ("structured logging", "Prometheus metrics", "tracing spans", "alert rules", "error tracking",
           "log retention"),
          ("emit_metric", "startSpan", "LOG_LEVEL", "alert_threshold_ratio", "captureException",
           "METRICS_PORT", "request_id"),
          ("src/observability/logging.py", "lib/metrics/prometheus.go", "config/alerts.yml",
           "src/observability/tracing.ts", "app/middleware/request_logger.rb"),
          ("alerts fire for healthy pods", "trace ids are lost between services",
           "logs drop fields with non-ASCII values", "metrics cardinality explodes"),
          ("observability", "infrastructure")),
)

TYPE_LABELS = (("bug", 0.45), ("feature", 0.25), ("tech-debt", 0.15), ("documentation", 0.05), ("support", 0.10))
PRIORITY_LABELS = ("priority::high", "priority::medium", "priority::low")
WORKFLOW_LABELS = ("workflow::ready for dev", "workflow::in dev", "workflow::in review", "workflow::blocked")
ENVIRONMENTS = ("staging", "production", "the review app", "a fresh GDK", "CI", "our self-managed instance")
VERSIONS = ("16.11", "17.2", "17.5", "17.8", "18.0", "18.1")

ISSUE_TITLES = (
    "{Thing} fails: {symptom}",
    "{Symptom}",
    "{Symptom} in {component}",
    "`{ident}` returns the wrong value when {symptom}",
    "Refactor {thing} to drop `{ident}`",
    "Add support for {thing} in {component}",
    "Investigate {thing} regression on {env}",
    "Document how {thing} works",
    "Flaky: `{file}` fails intermittently",
    "Follow-up from #{issue}: {thing}",
)
MR_TITLES = (
    "Fix {thing}: {symptom}",
    "Refactor `{ident}` in {file}",
    "Add {thing} to {component}",
    "Draft: rework {thing}",
    'Resolve "{Symptom}"',
    "Use `{ident2}` instead of `{ident}`",
    "Speed up {thing}",
    "Remove deprecated {thing} code path",
)
ISSUE_PARAGRAPHS = (
    "When {symptom}, {thing} stops working for affected users. This started on {env} after version {version}.",
    "### Steps to reproduce\n\n1. Enable {thing} on {env}\n2. Trigger `{ident}`\n3. Watch the logs of `{file}`",
    "### Expected behavior\n\n`{ident}` should handle this case. Instead {symptom}.",
    "The relevant code is in `{file}`, around the call to `{ident}`. `{ident2}` looks suspicious too.",
    "This is probably related to #{issue} and the change in !{mr}.",
    "```\n{Error} in {ident}: unexpected state (request_id={hex8})\n    at {file}:{line}\n```",
    "Customers on the {plan} plan reported this {count} times this week.",
    "### Proposal\n\nMove {thing} behind `{ident}` and cover it with tests in `{file}`.",
)
MR_PARAGRAPHS = (
    "## What does this MR do?\n\nReworks {thing} so that `{ident}` no longer {symptom_short}.",
    "Closes #{issue}",
    "Related to #{issue} and follows up on !{mr}.",
    "## How to test\n\n1. Check out this branch\n2. Run `{test_cmd}`\n3. Verify `{ident2}` on {env}",
    "Changes `{file}` and adds coverage for `{ident}`.",
    "- [x] Tests added\n- [x] Changelog entry\n- [ ] Documentation updated",
    "Benchmarks: p95 went from {n1}ms to {n2}ms on {env}.",
)
COMMENTS = (
    "I can reproduce this on {env}. The stack trace points at `{ident}` in `{file}`.",
    "Looks like a regression from !{mr}.",
    "Could we add a test for `{ident}` before merging?",
    "Same root cause as #{issue}, I think.",
    "I've seen this on {env} too, started around version {version}.",
    "Thanks! This fixes it for us.",
    "Can you share the logs from `{file}`?",
    "The fix in `{ident}` looks right, but `{ident2}` has the same problem.",
    "Deployed to {env}: p95 dropped from {n1}ms to {n2}ms.",
    "Is `{CONST}` still needed after this?",
    "We should move this behind a feature flag first.",
    "+1, this blocks our upgrade to {version}.",
    "Closing as duplicate of #{issue}.",
    "I pushed a fix in !{mr}, could you verify?",
    "Bumping this: {count} more customers hit it this week.",
    "LGTM 👍",
    "Root cause: `{ident}` reads `{CONST}` before the config is loaded, so {symptom_short}.",
    "Here's a minimal repro:\n\n```\n{ident}({arg})\n```",
)
INTERNAL_COMMENTS = (
    "Internal: the affected customer is on the {plan} plan, ticket {hex8}.",
    "Internal note: escalated by support, please prioritise.",
    "Internal: security impact looks low, no data exposure in `{file}`.",
)
DIFF_COMMENTS = (
    "nit: `{ident}` could be a constant.",
    "This will break when `{CONST}` is zero.",
    "Should this use `{ident2}` instead?",
    "Missing error handling here.",
    "Can we avoid the N+1 query here?",
    "Please add a comment explaining why we retry.",
    "This changes the public behaviour of `{ident}`; is that intended?",
    "suggestion: rename to `{ident2}`",
)
REPLIES = (
    "Good catch, fixed in the latest push.",
    "Done.",
    "I'd rather keep it as is; `{ident}` is only called once.",
    "Agreed, will follow up in #{issue}.",
    "Not sure, @{user} what do you think?",
    "Fixed, and added a test in `{file}`.",
    "Resolved by !{mr}.",
)
ISSUE_SYSTEM = (
    "assigned to @{user}",
    "mentioned in merge request !{mr}",
    "marked this issue as related to #{issue}",
    "changed milestone to %{milestone}",
    "changed the description",
    "created branch [`{branch}`]({web}/-/compare/main...{branch}) to address this issue",
    "marked this issue as a duplicate of #{issue}",
    "changed due date to {date}",
)
MR_SYSTEM = (
    "added {count} commits\n\n<ul><li>{hex8} - {Thing} fix</li></ul>",
    "requested review from @{user}",
    "approved this merge request",
    "mentioned in issue #{issue}",
    "marked this merge request as **ready**",
    "assigned to @{user}",
    "changed the description",
)
ERRORS = ("TypeError", "KeyError", "RuntimeError", "NullPointerException", "TimeoutError", "ActiveRecord::RecordNotFound")
PLANS = ("Free", "Premium", "Ultimate")
TEST_CMDS = ("make test", "bundle exec rspec", "pytest -k {ident}", "yarn jest", "go test ./...")

FIRST_NAMES = ("Alex", "Priya", "Jonas", "Mei", "Carlos", "Fatima", "Ola", "Sven", "Aiko", "Diego", "Nadia", "Tomás",
               "Grace", "Yusuf", "Lena", "Ravi", "Chloé", "Kwame", "Ingrid", "Hiro", "Amara", "Pavel", "Zoe", "Omar")
LAST_NAMES = ("Morgan", "Patel", "Berg", "Chen", "Silva", "Haddad", "Nordmann", "Larsen", "Tanaka", "Ramos",
              "Kowalski", "Okafor", "Dubois", "Novak", "Iyer", "Schmidt", "Adeyemi", "Rossi", "Kim", "Svensson")
PROJECT_NAMES = (
    ("platform-api", "Core REST and GraphQL API"),
    ("web-console", "The customer-facing web application"),
    ("billing-service", "Subscriptions, invoices and quotas"),
    ("infra", "Deployment, Helm charts and Terraform"),
    ("search-service", "Indexing and search"),
    ("mobile-app", "iOS and Android clients"),
    ("data-pipeline", "Event ingestion and analytics"),
    ("notifications", "Email, Slack and push delivery"),
)
