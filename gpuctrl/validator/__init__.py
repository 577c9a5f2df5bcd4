"""The validator node agent: driver, toolkit, CUDA and device-plugin checks."""
