"""The controller: provisions clusters (docker, local, ssh), drives a Target, runs a test end to
end into the results store, and the `schemachaos` CLI."""
