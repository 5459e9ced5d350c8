"""One trace of a function giving its value and its VJP with respect to several arguments.

autograd's `make_vjp(fun, argnum=(0, 1, ...))` packs the arguments into a traced tuple, which costs
two extra primitives per argument on every call. The augmented dynamics of the adjoint calls this
once per solver step, so here each argument gets its own root node instead and one backward pass
collects the gradients of all of them. Works inside an outer trace too (higher derivatives),
exactly as make_vjp does.
"""
from autograd.core import VJPNode, add_outgrads, vspace
from autograd.tracer import isbox, new_box, trace_stack
from autograd.util import toposort


def value_and_vjp(fun, args, wrt, g):
    """(fun(*args), [g^T d fun / d args[i] for i in wrt])."""
    roots, boxed = {}, list(args)
    with trace_stack.new_trace() as trace_id:
        for i in wrt:
            roots[i] = VJPNode.new_root()
            boxed[i] = new_box(args[i], trace_id, roots[i])
        out = fun(*boxed)
        traced = isbox(out) and out._trace == trace_id
    if not traced:
        return out, [vspace(args[i]).zeros() for i in wrt]
    grads = {}
    outgrads = {out._node: (g, False)}
    for node in toposort(out._node):
        outgrad = outgrads.pop(node)[0]
        grads[node] = outgrad
        for parent, ingrad in zip(node.parents, node.vjp(outgrad)):
            outgrads[parent] = add_outgrads(outgrads.get(parent), ingrad)
    return out._value, [grads[roots[i]] if roots[i] in grads else vspace(args[i]).zeros()
                        for i in wrt]
