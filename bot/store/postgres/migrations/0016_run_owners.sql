-- 16: which instance claimed a run: on a store several daemons share, a run whose claimer is
-- alive is its claimer's to finish; one whose claimer stopped beating is taken over.

ALTER TABLE schedule_runs ADD COLUMN owner TEXT;
