"""The contract: what the host may import from the sandbox side. Standard library only
(never torch): the wire format (`wire`, `wire_diagnostics`), the one median (`stats`), the
acceptance rules both ends run (`rules`), the rule that makes a candidate's text safe (`text`)
and the catalogue of every error code (`codes`).
"""
