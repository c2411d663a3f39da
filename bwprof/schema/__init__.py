"""bwprof's data model: the rows every measurement becomes, their metrics and flags, and the
run metadata. The bottom layer: measurement code and the report layer both import it, it
imports neither."""
