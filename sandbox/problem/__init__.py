"""The problem contracts: a task's problem (inputs, reference, check), the field formats
(KernelBench, GPU MODE), tensors and pytrees, and the problem's own process.
"""
