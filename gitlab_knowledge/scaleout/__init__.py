"""The distributed deployment: Dagster on PostgreSQL, steps on Celery workers, the embedding
fanned out over them (README "Scaling out", docs/SCALING.md). Needs `pip install '.[scaleout]'`;
nothing else in the package imports it."""
