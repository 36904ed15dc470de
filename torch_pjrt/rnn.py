"""``nn.LSTM`` on pjrt tensors: the input projection of all time steps as one matrix product.

torch's LSTM (``aten::lstm``, a composite op) projects the whole input sequence at once only for
CPU tensors (``FullLayer`` in ATen's RNN.cpp checks ``is_cpu()``); on any other device it runs one
small product per time step and layer, three with their gradients. XLA:CPU runs each product as
its own Eigen call, so the LSTM benchmark's training step executed 181 small dots. This kernel,
registered for pjrt tensors at the autograd key, computes the same recurrence from the same
differentiable ops (``_thnn_fused_lstm_cell``, the cell torch uses on accelerators), with one
projection per layer. Configurations it does not cover (bidirectional, ``proj_size``) take
torch's own decomposition.
"""

import torch

_library = None  # keeps the registration alive


def _lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    per_layer = 4 if has_biases else 2
    if bidirectional or len(params) != per_layer * num_layers or input.dim() != 3:
        # ATen's own composite kernel (OpOverload.decompose would prefer torch._decomp's Python one).
        return torch.ops.aten.lstm.input._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, input, hx,
                                                params, has_biases, num_layers, dropout, train,
                                                bidirectional, batch_first)
    x = input.transpose(0, 1) if batch_first else input  # [time, batch, features]
    h0, c0 = hx
    last_h, last_c = [], []
    for layer in range(num_layers):
        w_ih, w_hh, *biases = params[layer * per_layer:(layer + 1) * per_layer]
        b_ih, b_hh = biases if has_biases else (None, None)
        input_gates = torch.matmul(x, w_ih.t())  # every step's projection in one product
        h, c = h0[layer], c0[layer]
        outputs = []
        for step_gates in input_gates.unbind(0):
            h, c, _ = torch.ops.aten._thnn_fused_lstm_cell(step_gates, torch.matmul(h, w_hh.t()), c, b_ih, b_hh)
            outputs.append(h)
        last_h.append(h)
        last_c.append(c)
        x = torch.stack(outputs)
        if dropout != 0 and train and layer < num_layers - 1:
            x = torch.dropout(x, dropout, True)
    output = x.transpose(0, 1) if batch_first else x
    return output, torch.stack(last_h), torch.stack(last_c)


def register():
    """Registers the kernel for ``aten::lstm.input`` on pjrt tensors (AutogradPrivateUse1)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        _library.impl("lstm.input", _lstm, "AutogradPrivateUse1")
