"""What a sync of the raw layer reports: per resource, per run, and as the layer's typed stats."""

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from gitlab_knowledge.layer_stats import LayerStats
from gitlab_knowledge.layers import RAW


@dataclass
class ResourceStats:
    listed: int = 0  # items the list calls returned
    fetched: int = 0  # items taken in (new or changed; all of them with --full)
    new: int = 0
    updated: int = 0
    deleted: int = 0
    discussion_fetches: int = 0  # parents whose threads were fetched
    rechecked: int = 0  # of those, ThrottledTouch rechecks
    threads_new: int = 0
    threads_updated: int = 0
    threads_deleted: int = 0
    list_calls: int = 0
    file_fetches: int = 0  # merge requests whose changed files were fetched (sync/files.py)
    rejected: int = 0  # items and threads the store cannot hold (store/payloads.py), each named in a line


@dataclass
class SyncResult:
    project: str
    project_id: int | None
    mode: str
    sync_run_id: int | None
    resources: dict[str, ResourceStats] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    file_calls: int = 0  # requests for MR file lists, pages included
    path_lookups: int = 0  # GET /projects/:path for project paths links name (sync/redirects.py)

    def totals(self) -> dict[str, int]:
        keys = ResourceStats.__dataclass_fields__.keys()
        return {k: sum(getattr(r, k) for r in self.resources.values()) for k in keys}

    def as_dict(self) -> dict[str, Any]:
        return {
            "project": self.project, "project_id": self.project_id, "mode": self.mode,
            "sync_run_id": self.sync_run_id, "duration_s": round(self.duration_s, 3),
            "resources": {k: asdict(v) for k, v in self.resources.items()},
            "totals": self.totals(), "file_calls": self.file_calls,
            "path_lookups": self.path_lookups, **self.client,
        }


@dataclass
class RawStats(LayerStats):
    """The raw layer's report: the totals over both kinds plus the GitLab client's counters."""

    ASSET: ClassVar[str] = RAW.asset

    mode: str = "incremental"
    sync_run_id: int | None = None
    items_listed: int = 0
    items_fetched: int = 0
    items_new: int = 0
    items_updated: int = 0
    items_deleted: int = 0
    threads_fetched: int = 0
    threads_rechecked: int = 0
    threads_new: int = 0
    threads_updated: int = 0
    threads_deleted: int = 0
    files_fetched: int = 0  # merge requests whose file lists were fetched
    file_calls: int = 0
    path_lookups: int = 0  # project paths links name, looked up once each (sync/redirects.py)
    items_rejected: int = 0  # issues, MRs and threads rejected as unstorable
    api_calls: int = 0
    api_retries: int = 0
    rate_limited_429: int = 0
    rate_limit_wait_s: float = 0.0
    duration_s: float = 0.0

    @classmethod
    def of(cls, result: SyncResult) -> "RawStats":
        totals = result.totals()
        client = result.client
        return cls(
            mode=result.mode, sync_run_id=result.sync_run_id, items_listed=totals["listed"],
            items_fetched=totals["fetched"], items_new=totals["new"], items_updated=totals["updated"],
            items_deleted=totals["deleted"], threads_fetched=totals["discussion_fetches"],
            threads_rechecked=totals["rechecked"], threads_new=totals["threads_new"],
            threads_updated=totals["threads_updated"], threads_deleted=totals["threads_deleted"],
            files_fetched=totals["file_fetches"], file_calls=result.file_calls, path_lookups=result.path_lookups,
            items_rejected=totals["rejected"], api_calls=client.get("api_calls", 0), api_retries=client.get("retries", 0),
            rate_limited_429=client.get("throttled", 0),
            rate_limit_wait_s=round(client.get("throttle_wait_s", 0.0) + client.get("limiter_wait_s", 0.0), 3),
            duration_s=round(result.duration_s, 3))

    def summary_markdown(self, result: SyncResult) -> str:
        lines = [
            f"**{result.project}** ({self.mode} sync, run {self.sync_run_id}) in {self.duration_s:.1f}s, "
            f"{self.api_calls} API calls",
            "",
            "| resource | listed | fetched | new | updated | deleted | threads fetched | rechecked |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, r in result.resources.items():
            lines.append(f"| {name} | {r.listed} | {r.fetched} | {r.new} | {r.updated} | {r.deleted} | "
                         f"{r.discussion_fetches} | {r.rechecked} |")
        return "\n".join(lines)
