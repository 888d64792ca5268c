"""The small-model repairs: code that second-guesses what a capped profile's model wrote, one
module per kind of slip (`programs`, `values`, `paths`, `texts`, `notes`, `refusals`, `salvage`)."""
