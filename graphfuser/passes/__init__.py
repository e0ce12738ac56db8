"""Graph passes, run in this order by the executor (``PIPELINE``).

Before profiling (on the captured graph, so new nodes get profiled types):
   specialize_training  the module ``training`` flags the graph reads become the constants of
                  this specialization (passes/module_flags.py; the executor keeps one
                  specialization per set of flags, as per autocast state)
   insert_autocast  under torch.autocast only: autocast's casts become explicit nodes (before
                  decompose, which splits ops whose autocast policy is their own)
   decompose      global average pools become means; group_norm with num_groups > 1 an instance
                  norm of the grouped view; opt-in: split every linear / conv bias add
   randomize      dropout in training, native_dropout, rand_like, bernoulli draw from Philox:
                  a philox_state node per op plus the op table's random row (passes/random.py;
                  off with PYTORCH_NVFUSER_DISABLE=fused_rng)
   apply_conv_layouts  once a first round of profiling made a channels-last plan (CUDA convs;
                  passes/conv_layout.py): conv weights to channels-last, graph outputs back to
                  their profiled layout; profiling then starts again on the planned graph

After profiling:

0-. plan_conv_layouts  first round only: the channels-last plan (or none)
0-. plan_attention  first round only: which hand-written attention patterns become SDPA
                  (passes/attention.py; applied, as the layout plan is, before profiling again)
0-. plan_rotary   first round only: which rotary embeddings lose their cat (passes/rotary.py;
                  applied likewise)
0-. plan_row_layouts  first round only: which permuted activations are made dense before rows of
                  them are normalized (passes/row_layout.py; applied likewise, first)
0-. plan_sdpa_math  first round only: which SDPA calls run the math backend and are written out as
                  two GEMMs around a fused mask add and softmax (passes/sdpa_math.py; applied
                  likewise, before the attention rewrite)

0. fold_constant_ifs  inline If nodes with constant conditions (F.* wrappers' `inplace` flags), so
                  they do not act as barriers (before everything that looks at blocks)
0a. fill_numbers  ``copy_(t, aten::tensor(number, dtype(t)))`` (TorchScript's ``t[...] = number``)
                  becomes ``t.fill_(number)``, as in eager: one kernel instead of two
0b. batch_norm_training  a training batch_norm's running-stats update becomes separate nodes
                  (its copy_ placed after the ops that follow it) so the normalization fuses;
                  after fold_constant_ifs (a folded flag gives the straight rewrite), before
                  functionalize and partition (which see the new nodes)
0c. split_biases  linear / conv bias adds whose only consumer fuses (for a conv: or a permute whose
                  consumer fuses, the add then after the permute) leave the linear / conv (needs
                  profiled dtypes; before functionalize, which then frees in-place activations on
                  the add; the partition folds back the ones no group took)
0c'. route_bias_gradients  under grad, a linear / addmm whose result goes on to a fused op keeps
                  its bias in the GEMM and gets its bias gradient through graphfuser::bias_grad, summed
                  by that op's fused backward (passes/bias.py; after split_biases)
0d. pad_gemms    a CUDA linear whose output width breaks cuBLAS's 16-byte alignment computes into
                  a padded width and slices it back (passes/gemm_pad.py; after split_biases,
                  whose split linears it leaves alone)
1. functionalize  in-place ops on fresh, unaliased intermediates become functional where eager's
                  in-place shape / dtype rules hold on the profiled types (must precede partition,
                  which never fuses in-place ops; may-alias sets come from schema annotations,
                  passes/aliasing.py)
1b. sink_views   permute / transpose / unsqueeze of a single-use pointwise result move onto its
                  inputs, so views between fusible ops stop splitting groups (after functionalize,
                  whose alias sets see the original views; before partition)
1c. materialize_broadcasts  a reshape that copies an expanded view (grouped-query attention's
                  repeat_kv) reads a graphfuser::dense_copy of it instead, which fuses
                  (passes/broadcast_copy.py; before partition)
1d. bias_masks   the boolean masks of SDPA calls become the additive bias their backend would
                  make, once per mask where it is made, not in every call (passes/sdpa_bias.py;
                  CUDA; before partition, which fuses the conversion)
1e. dense_unbinds  unbind under grad takes its gradient in its input's layout, a copy per piece,
                  not eager's contiguous stack copied again after a permute (passes/unbind_grad.py)
2. partition      the graph fuser: shape reads move to their source value (philox_state's count
                  too), dead nodes go (dce), then fusion groups from the op table's verdicts and
                  the knobs; a lone reduction recomputes the pointwise chain it reads from another
                  group where that moves fewer bytes (passes/reduction_split.py); functionalized
                  ops no group took become in-place again
3. insert_guards  guard + If(group | fallback) around every group (needs the groups' types); a
                  reduction's profiled scalar arguments become group constants the guard checks
4. dce            drop what the rewrites left unused (after everything that replaces uses)
"""
from .batch_norm import batch_norm_training
from .bias import route_bias_gradients, split_biases
from .conv_layout import apply_conv_layouts, plan_conv_layouts
from .autocast import insert_autocast
from .dce import dce
from .decompose import decompose
from .functionalize import functionalize
from .gemm_pad import pad_gemms
from .guard import insert_guards, wrap_group
from .partition import partition
from .random import randomize
from .simplify import fill_numbers, fold_constant_ifs
from .sink_views import sink_views

PRE_PROFILING = ("insert_autocast", "decompose", "randomize", "apply_conv_layouts")
PIPELINE = ("plan_conv_layouts", "fold_constant_ifs", "fill_numbers", "batch_norm_training", "split_biases",
            "route_bias_gradients", "pad_gemms", "functionalize", "sink_views", "partition", "insert_guards", "dce")

__all__ = ["PRE_PROFILING", "PIPELINE", "apply_conv_layouts", "plan_conv_layouts", "insert_autocast", "batch_norm_training", "decompose", "fill_numbers",
           "fold_constant_ifs",
           "functionalize", "sink_views", "split_biases", "route_bias_gradients", "pad_gemms", "partition", "insert_guards", "wrap_group", "dce", "randomize"]
