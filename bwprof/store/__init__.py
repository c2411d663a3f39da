"""The store layer: what a run leaves on disk and how it is read back. `export` claims a run
folder and writes its rows as they finish, `atomic` writes every other file whole, `formats`
turns frames into CSV and Parquet cells, `runfolder` reads a saved folder with one-line
errors, `runlock` tells a live run's folder from an abandoned one, and `history` keeps every
run's headline figures for `bwprof trend`. Nothing here measures, judges or draws."""
