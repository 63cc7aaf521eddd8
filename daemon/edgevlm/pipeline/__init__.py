"""The request pipeline between a front door and the engine: admission (limits, preflight
token budget, ``image_ref`` capabilities), media preparation and the vision-feature cache."""
