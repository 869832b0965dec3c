#!/usr/bin/env bash
# OpenMPI rsh agent for namespace labs: "agent.sh [ssh-style options] HOST CMD..."
# runs CMD inside HOST's namespace. HOST is a lab address (10.0.0.N) or a host
# name (hN); BENCH_MPI_LAB (the lab name) maps it to pl-LAB-hN.
set -e
while [[ $1 == -* ]]; do shift; done
host=$1; shift
case $host in
  10.0.0.*) node=h${host##*.} ;;
  *) node=$host ;;
esac
exec ip netns exec "pl-${BENCH_MPI_LAB:?}-$node" /bin/sh -c "$*"
