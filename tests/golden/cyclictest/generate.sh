#!/bin/sh
# Regenerates the cyclictest golden files of tests/test_import*.py with the
# installed cyclictest (rt-tests).  Needs root (SCHED_FIFO, mlockall).  The
# files are real outputs, so every regeneration gives other numbers: the tests
# read their expectations from each file's own summary lines, never from
# constants.  Runs are short (1-2 s) and histograms small, so the files stay
# small enough to commit.
#
#   sh tests/golden/cyclictest/generate.sh
set -eu
cd "$(dirname "$0")"
ct() { cyclictest -m -p90 -i200 -t2 -a0-1 "$@"; }

ct -h 100 -q -D 1 > hist.txt                           # -h N -q
ct -H 100 -q -D 1 > histofall.txt                      # -H N: all-threads column
ct -N -h 50 -q -D 1 > nsecs.txt                        # -N: values in ns
ct -h 100 -q -D 1 --spike=100 > spike.txt              # --spike lines
ct -h 100 -q -D 2 -b 300 > break.txt                   # -b: stops at the first wake-up > 300 us
ct -q -D 1 > summary.txt                               # no histogram: final status lines only
ct -N -q -D 1 > summary-nsecs.txt                      # the same in ns
ct -D 1 > summary-tty.txt                              # not quiet: status lines with terminal escapes
ct -h 40 -D 1 > hist-tty.txt                           # not quiet, with a histogram
# --json, each with the text output of the same run as the independent truth
ct -h 100 -q -D 1 --json=run.json > run.txt
ct -N -h 50 -q -D 1 --json=run-nsecs.json > run-nsecs.txt
ct -q -D 1 --json=run-nohist.json > run-nohist.txt
# The classic blog recipe: '#' lines removed, separators turned into commas,
# a header inserted with sed.
grep -v '^#' hist.txt | tr ' ' ',' | tr '\t' ',' > recipe.csv
sed -i '1i time,core1,core2' recipe.csv
# The same with the header typed as '1i time,...\n': sed inserts the '\n' too,
# leaving an empty second line.
grep -v '^#' histofall.txt | tr ' ' ',' | tr '\t' ',' > recipe-histofall.csv
sed -i '1i time,core1,core2\n' recipe-histofall.csv
# From a run that was not quiet: status lines with escapes end up in the CSV.
grep -v '^#' hist-tty.txt | tr ' ' ',' | tr '\t' ',' > recipe-tty.csv
sed -i '1i time,core1,core2' recipe-tty.csv
# SCHED_OTHER (no real-time priority), not quiet: "policy: other/other", P: 0
cyclictest -m -i200 -t2 -D 1 > other.txt
# Only the '#' lines (grep '^#'), as Pi scripts keep a summary: no histogram rows
grep '^#' hist.txt > summary-lines.txt
# -v: a line per wake-up ("thread:cycle:value"), after a header; with -q the
# final status lines follow; -N: the values in ns
ct -v -l 1000 > verbose.txt
ct -v -q -l 1000 > verbose-quiet.txt
ct -v -N -l 300 > verbose-nsecs.txt
# A saved terminal session: the prompt line with the command, then its output;
# -a 1 pins the one thread to CPU 1, which the command line alone tells
cmd="cyclictest -m -p90 -i200 -t1 -a 1 -h 100 -q -D 1"
{ echo "root@pi:~# $cmd"; $cmd; } > session.txt
