"""The request pipeline between a front door and the engine: admission (limits, preflight
token budget, ``image_ref`` capabilities) into an :class:`~.admission.Admitted` job, the job
queue and the one worker thread (:mod:`.jobs`, :mod:`.worker`), the run of a job
(:mod:`.run`: media preparation with the admission's bounds, then the engine) and the
vision-feature cache."""
