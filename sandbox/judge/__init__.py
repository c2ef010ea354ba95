"""The judge: the trusted process inside the sandbox. Mode dispatch (`run`), the evaluation
and its stages (compile, correctness, benchmark, acceptance, calibration, task check), the
checks on what the runners return, and the clock of every stage.
"""
