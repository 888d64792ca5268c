"""navi_jobs_* for GET /metrics, read from the database at each scrape: the totals every worker
added up (`JobStat`) and the queue as it is now."""

from __future__ import annotations

import logging

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from .health import queue_state
from .models import JobStat
from .stats import BUCKETS

log = logging.getLogger(__name__)


class JobsCollector:
    def describe(self):
        return []  # nothing asked of the database when registered, only at a scrape

    def collect(self):
        try:
            stats = list(JobStat.objects.all())
            queued, oldest_s, workers = queue_state()
        except Exception:  # no database (yet): the other metrics are still served
            log.warning("job metrics unavailable", exc_info=True)
            return
        total = CounterMetricFamily("navi_jobs", "Finished background jobs by task and outcome "
                                    "(ok, ready, failed, cancelled, continued, error, lost…)", labels=["task", "outcome"])
        durations: dict[str, tuple[list[int], float]] = {}
        for stat in stats:
            total.add_metric([stat.task, stat.outcome], stat.count)
            counts, seconds = durations.get(stat.task, ([0] * (len(BUCKETS) + 1), 0.0))
            for i, n in enumerate(stat.buckets or []):
                if i < len(counts):
                    counts[i] += n
            durations[stat.task] = (counts, seconds + stat.seconds)
        yield total
        histogram = HistogramMetricFamily("navi_job_duration_seconds", "Wall-clock time of one background job "
                                          "(a slice, for jobs done in slices)", labels=["task"])
        for task, (counts, seconds) in sorted(durations.items()):
            cumulative, running = [], 0
            for limit, n in zip([*map(str, BUCKETS), "+Inf"], counts):
                running += n
                cumulative.append((limit, running))
            histogram.add_metric([task], cumulative, seconds)
        yield histogram
        yield GaugeMetricFamily("navi_jobs_queued", "Background jobs due and waiting for a worker", value=queued)
        yield GaugeMetricFamily("navi_jobs_oldest_seconds", "How long the oldest waiting job has waited", value=oldest_s)
        yield GaugeMetricFamily("navi_job_workers", "Live job worker processes (fresh heartbeat)", value=workers)
