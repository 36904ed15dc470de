"""``nn.LSTM`` on pjrt tensors: one op per layer and direction, lowered as one loop over time.

torch's LSTM (``aten::lstm``, a composite op) runs whole layers through one op only on CPU
(``mkldnn_rnn_layer``, oneDNN's LSTM) and cuDNN; on any other device it runs one small product and
one fused cell per time step and layer, and as many again in the backward. Traced, that is
hundreds of graph nodes per step, each paying torch's per-op cost. This kernel, registered for
pjrt tensors at the autograd key, calls the CPU path's per-layer op, ``aten::mkldnn_rnn_layer``:
torch's own autograd formula and Meta kernel come with it, and lowering/lstm_layer.cc lowers it
and its backward as stablehlo.while loops. As on CPU, float64 (whose gradients that op's Meta
kernel would give as float32) keeps the per-step form, built from the same differentiable ops
with the input projection of all steps as one product; projected LSTMs (``proj_size``) and
bidirectional float64 ones take torch's own composite.
"""

import torch

_library = None  # keeps the registration alive


_LSTM_MODE = 2  # torch's RNN mode numbering (cuDNN's): RNN_RELU, RNN_TANH, LSTM, GRU
_LAYER_OP_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    directions = 2 if bidirectional else 1
    plain = len(params) == (4 if has_biases else 2) * num_layers * directions and input.dim() == 3
    if plain and input.dtype in _LAYER_OP_DTYPES and input.numel() != 0:
        run = _layer_op(hx[0].shape[-1], num_layers, has_biases, directions, train)
    elif plain and directions == 1:
        run = _layer_by_step
    else:
        # ATen's own composite kernel (OpOverload.decompose would prefer torch._decomp's Python one).
        return torch.ops.aten.lstm.input._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, input, hx, params,
                                                has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return _layers(input, hx, params, has_biases, num_layers, dropout, train, directions, batch_first, run)


def _layers(input, hx, params, has_biases, num_layers, dropout, train, directions, batch_first, run):
    """The layers and directions of an LSTM on time-major input, each computed by
    ``run(x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse) -> (output, h, c)`` (biases None without
    them), with dropout between layers in training."""
    per_direction = 4 if has_biases else 2
    x = input.transpose(0, 1) if batch_first else input  # [time, batch, features]
    last_h, last_c = [], []
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            w_ih, w_hh, *biases = params[index * per_direction:(index + 1) * per_direction]
            b_ih, b_hh = biases if has_biases else (None, None)
            out, h, c = run(x, w_ih, w_hh, b_ih, b_hh, hx[0][index], hx[1][index], direction == 1)
            outputs.append(out)
            last_h.append(h)
            last_c.append(c)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
        if dropout != 0 and train and layer < num_layers - 1:
            x = torch.dropout(x, dropout, True)
    output = x.transpose(0, 1) if batch_first else x
    return output, torch.stack(last_h), torch.stack(last_c)


def _layer_op(hidden, num_layers, has_biases, directions, train):
    """What torch's CPU LSTM does (``mkldnn_impl`` in ATen's mkldnn/RNN.cpp): one
    ``mkldnn_rnn_layer`` per layer and direction, on time-major input (that op's CPU kernel
    mishandles ``batch_first``), with zero biases where the LSTM has none."""
    def run(x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse):
        if b_ih is None:
            b_ih, b_hh = w_ih.new_zeros(w_ih.shape[0]), w_hh.new_zeros(w_hh.shape[0])
        out, h, c, _ = torch.ops.aten.mkldnn_rnn_layer(x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse, [], _LSTM_MODE,
                                                       hidden, num_layers, has_biases, directions == 2, False, train)
        return out, h, c
    return run


def _layer_by_step(x, w_ih, w_hh, b_ih, b_hh, h, c, reverse):
    """One direction-0 layer from torch's accelerator cell, with every step's input projection as
    one product."""
    input_gates = torch.matmul(x, w_ih.t())
    outputs = []
    for step_gates in input_gates.unbind(0):
        h, c, _ = torch.ops.aten._thnn_fused_lstm_cell(step_gates, torch.matmul(h, w_hh.t()), c, b_ih, b_hh)
        outputs.append(h)
    return torch.stack(outputs), h, c


def register():
    """Registers the kernel for ``aten::lstm.input`` on pjrt tensors: at the autograd key, and at
    the backend key for calls that skip autograd (``torch.inference_mode``)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        _library.impl("lstm.input", _lstm, "AutogradPrivateUse1")
        _library.impl("lstm.input", _lstm, "PrivateUse1")
