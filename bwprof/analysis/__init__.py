"""The analysis layer: what the rows mean. `run` is the one Run object every output takes;
`summary` and `figures` pick each path's figure and peak; `judge`, `bands`, `spec` and
`outliers` hold figures against what a healthy part reaches (`bwprof accept`); `compare`,
`trend`, `findings`, `fleet`, `roofline` and `model` compare, follow and explain them.
Nothing here measures, imports a GPU library, or formats for a terminal or a page."""
