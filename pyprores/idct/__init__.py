"""The IDCT accuracy check (IEEE 1180 scaled to ProRes): the reference model (model), a ProRes
writer for test blocks (writer) and the measurement (accuracy)."""
