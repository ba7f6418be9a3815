"""What an autograd graph holds: which backward nodes a tensor's gradient would pass through."""

from __future__ import annotations

from torch import Tensor


def graph_holds(output: Tensor, node_name: str) -> bool:
    """Whether the autograd graph behind ``output`` has a node named ``node_name`` (``grad_fn.name()``, e.g. a
    custom ``autograd.Function``'s ``_NameBackward``)."""
    seen, todo = set(), [output.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        if node.name() == node_name:
            return True
        seen.add(node)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return False
