"""The operators' dashboard (``GET /ui``): the topology coloured by lag, the bottleneck, per job
its recent barriers, per table its barriers, snapshots, leases and protections."""
