"""A unit's life on its host, pure: revisions and what a deploy must do (``revision``), what follows
the gate (``rollback_policy``), a worker's restart behind its gateways as a state machine
(``drain``), and which replica units stop first (``retire``). Above the planner (a revision is the
rendered plan's), below the deploy that carries it out."""
