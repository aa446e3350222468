#!/usr/bin/env bash

#PBS -N appliance
#PBS -q research
#PBS -A lab42
#PBS -l select=1:ncpus=8:mem=15GB
#PBS -l walltime=02:00:00
#PBS -l place=scatter
export DASK_DISTRIBUTED__WORKER__MEMORY__TARGET=False
export DASK_DISTRIBUTED__WORKER__MEMORY__SPILL=False
export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False
export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=False
python3 -m distributed.cli.dask_worker tcp://SCHEDULER-ADDRESS:8786 --name appliance-worker --nthreads 8 --memory-limit 14.90GiB --nanny --death-timeout 60 --resources appliance-model=1 --lifetime 115m --lifetime-stagger 4m
