#!/usr/bin/env bash

#SBATCH -J appliance
#SBATCH -p research
#SBATCH -A lab42
#SBATCH -n 1
#SBATCH --cpus-per-task=8
#SBATCH --mem=15G
#SBATCH -t 02:00:00
#SBATCH --constraint=avx2
export DASK_DISTRIBUTED__WORKER__MEMORY__TARGET=False
export DASK_DISTRIBUTED__WORKER__MEMORY__SPILL=False
export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False
export DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE=False
python3 -m distributed.cli.dask_worker tcp://SCHEDULER-ADDRESS:8786 --name appliance-worker --nthreads 8 --memory-limit 14.90GiB --nanny --death-timeout 60 --resources appliance-model=1 --lifetime 115m --lifetime-stagger 4m
