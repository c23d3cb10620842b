"""The store room: runs on disk, one folder each, and the index that lists them.

The store itself (runstore: save, load, list, the writers' lock); a run's
folder read without trusting it -- its result.json (runfolder) and its raw/
files (rawfile: bounded, regular files only, no link followed); the SQLite
index, its tables and rows (indexdb) and how it is kept in step with the
folders without reading them all (indexsync); and which runs a listing
keeps (runquery).  It uses the run model only; every other room of
results/ that reads a run's files does it through rawfile.
"""
