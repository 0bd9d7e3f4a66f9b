"""CI tools outside pytest: the matrix file, per-build source copies, the checker launcher, the
baseline manifest writer."""
