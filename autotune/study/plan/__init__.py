"""Which config runs next: the space, the starts (guides, playbook), the memory model, the plan."""
