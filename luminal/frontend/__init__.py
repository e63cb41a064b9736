"""GraphTensor ops by family; every op is a composition of the HLIR primitives."""
