"""Which OpInfos the decomposition tests run, and which of them must reach each decomposed
op (named without the ``aten.`` prefix; OpInfos as ``name.variant``).

Generated once from op_db (every OpInfo whose float32 samples reach a decomposition, thinned
to a cover) and kept as data, so that a lost sample or a renamed op fails a test instead of
silently testing less.
"""

FORWARD_OPINFOS = (
    '__getitem__ __rsub__ _native_batch_norm_legit _softmax_backward_data abs acos acosh add '
    'addcdiv addcmul addmm addmm.decomposed all amax amin any arange argmax argmin asin asinh '
    'atan atan2 atanh baddbmm bernoulli bitwise_and bitwise_left_shift bitwise_not bitwise_or '
    'bitwise_right_shift bitwise_xor cat ceil clamp clamp_max clamp_min clone combinations '
    'constant_pad_nd copysign corrcoef cos cosh cov deg2rad div.floor_rounding '
    'div.no_rounding_mode div.trunc_rounding dot empty empty_like empty_strided eq erf erfc '
    'erfinv exp exp2 expand expm1 eye fill flip floor floor_divide fmax fmin fmod frac full '
    'full_like gather ge gt hypot index_select isclose isfinite isinf isnan kron le lerp lgamma '
    'log log10 log1p log2 log_softmax log_softmax.with_dtype logaddexp logical_and logical_not '
    'logical_or logical_xor logit logsumexp lt masked.amax masked.amin masked.argmax '
    'masked.argmin masked.log_softmax masked.logaddexp masked.logsumexp masked.mean masked.prod '
    'masked.softmax masked.std masked.sum masked.var masked_fill max.binary '
    'max.reduction_no_dim max.reduction_with_dim max_pool2d_with_indices_backward maximum mean '
    'min.binary min.reduction_no_dim min.reduction_with_dim minimum mul mv nan_to_num narrow '
    'native_batch_norm native_dropout_backward native_group_norm native_layer_norm ne neg '
    'new_empty new_empty_strided new_full new_ones new_zeros nn.functional.adaptive_avg_pool2d '
    'nn.functional.binary_cross_entropy nn.functional.cross_entropy nn.functional.ctc_loss '
    'nn.functional.elu nn.functional.embedding nn.functional.fractional_max_pool3d '
    'nn.functional.gaussian_nll_loss nn.functional.gelu nn.functional.hardsigmoid '
    'nn.functional.hardswish nn.functional.hardtanh nn.functional.huber_loss '
    'nn.functional.instance_norm nn.functional.leaky_relu nn.functional.logsigmoid '
    'nn.functional.mish '
    'nn.functional.mse_loss nn.functional.relu nn.functional.silu nn.functional.smooth_l1_loss '
    'nn.functional.softplus nn.functional.threshold norm ones ones_like permute pow prod '
    'rad2deg rand_like randn randn_like reciprocal remainder repeat round rsqrt rsub '
    'scalar_tensor scatter scatter_add select sigmoid sign signal.windows.bartlett signbit sin '
    'sinh slice softmax softmax.with_dtype split split.list_args split_with_sizes sqrt squeeze '
    'squeeze.multiple stack std std.unbiased std_mean std_mean.unbiased sub sum t '
    'take_along_dim tan tanh transpose tril triu trunc unbind unsqueeze var var.unbiased '
    'var_mean var_mean.unbiased view where xlogy zeros zeros_like '
).split()

BACKWARD_OPINFOS = (
    'clamp cumprod erf ldexp native_batch_norm native_group_norm native_layer_norm '
    'nn.functional.binary_cross_entropy nn.functional.elu nn.functional.embedding '
    'nn.functional.gelu nn.functional.group_norm nn.functional.hardsigmoid '
    'nn.functional.hardswish nn.functional.huber_loss nn.functional.interpolate.area '
    'nn.functional.leaky_relu nn.functional.linear_cross_entropy.chunked_none '
    'nn.functional.logsigmoid '
    'nn.functional.max_pool2d nn.functional.mish nn.functional.mse_loss nn.functional.nll_loss '
    'nn.functional.relu nn.functional.relu6 nn.functional.silu nn.functional.smooth_l1_loss '
    'nn.functional.softplus pow prod renorm scatter sigmoid sinh softmax.with_dtype tanh trapz '
    'unbind var_mean xlogy '
).split()

# decomposed op -> the OpInfo whose samples (forward) must reach it
FORWARD = {
    '_adaptive_avg_pool2d.default': 'nn.functional.adaptive_avg_pool2d',
    '_log_softmax.default': 'log_softmax',
    'log_sigmoid_forward.default': 'nn.functional.logsigmoid',
    '_native_batch_norm_legit.default': '_native_batch_norm_legit',
    '_softmax.default': 'softmax',
    '_softmax_backward_data.default': '_softmax_backward_data',
    '_to_copy.default': 'masked.std',
    '_unsafe_view.default': 'kron',
    'abs.default': 'abs',
    'acos.default': 'acos',
    'acosh.default': 'acosh',
    'add.Scalar': 'isclose',
    'add.Tensor': 'add',
    'addcdiv.default': 'addcdiv',
    'addcmul.default': 'addcmul',
    'addmm.default': 'addmm',
    'alias.default': 'nn.functional.instance_norm',
    'all.default': 'all',
    'all.dim': 'all',
    'all.dims': 'all',
    'amax.default': 'amax',
    'amin.default': 'amin',
    'any.default': 'any',
    'any.dim': 'any',
    'any.dims': 'any',
    'arange.default': 'combinations',
    'arange.start': 'arange',
    'arange.start_step': 'arange',
    'argmax.default': 'argmax',
    'argmin.default': 'argmin',
    'asin.default': 'asin',
    'asinh.default': 'asinh',
    'atan.default': 'atan',
    'atan2.default': 'atan2',
    'atanh.default': 'atanh',
    'baddbmm.default': 'baddbmm',
    'bernoulli.default': 'bernoulli',
    'binary_cross_entropy.default': 'nn.functional.binary_cross_entropy',
    'bitwise_and.Tensor': 'bitwise_and',
    'bitwise_left_shift.Tensor': 'bitwise_left_shift',
    'bitwise_or.Tensor': 'bitwise_or',
    'bitwise_right_shift.Tensor': 'bitwise_right_shift',
    'bitwise_xor.Tensor': 'bitwise_xor',
    'cat.default': 'cat',
    'ceil.default': 'ceil',
    'clamp.Tensor': 'clamp',
    'clamp.default': 'corrcoef',
    'clamp_max.Tensor': 'clamp_max',
    'clamp_min.Tensor': 'clamp_min',
    'clamp_min.default': 'nn.functional.ctc_loss',
    'clone.default': 'clone',
    'constant_pad_nd.default': 'constant_pad_nd',
    'copysign.Tensor': 'copysign',
    'cos.default': 'cos',
    'cosh.default': 'cosh',
    'deg2rad.default': 'deg2rad',
    'div.Scalar': 'nn.functional.cross_entropy',
    'div.Tensor': 'div.no_rounding_mode',
    'div.Tensor_mode': 'div.floor_rounding',
    'dot.default': 'dot',
    'elu.default': 'nn.functional.elu',
    'embedding.default': 'nn.functional.embedding',
    'empty.memory_format': 'empty',
    'empty_like.default': 'empty_like',
    'empty_strided.default': 'empty_strided',
    'eq.Scalar': 'nn.functional.ctc_loss',
    'eq.Tensor': 'eq',
    'erf.default': 'erf',
    'erfc.default': 'erfc',
    'erfinv.default': 'erfinv',
    'exp.default': 'exp',
    'exp2.default': 'exp2',
    'expand.default': 'expand',
    'expm1.default': 'expm1',
    'eye.default': 'eye',
    'eye.m': 'eye',
    'fill.Scalar': 'fill',
    'flip.default': 'flip',
    'floor.default': 'floor',
    'floor_divide.default': 'floor_divide',
    'fmax.default': 'fmax',
    'fmin.default': 'fmin',
    'fmod.Tensor': 'fmod',
    'frac.default': 'frac',
    'full.default': 'full',
    'full_like.default': 'full_like',
    'gather.default': 'gather',
    'ge.Scalar': 'cov',
    'ge.Tensor': 'ge',
    'gelu.default': 'nn.functional.gelu',
    'gt.Tensor': 'gt',
    'hardsigmoid.default': 'nn.functional.hardsigmoid',
    'hardswish.default': 'nn.functional.hardswish',
    'hardtanh.default': 'nn.functional.hardtanh',
    'huber_loss.default': 'nn.functional.huber_loss',
    'hypot.default': 'hypot',
    'index.Tensor': '__getitem__',
    'index_select.default': 'index_select',
    'isinf.default': 'isinf',
    'isnan.default': 'isnan',
    'le.Scalar': 'cov',
    'le.Tensor': 'le',
    'leaky_relu.default': 'nn.functional.leaky_relu',
    'lerp.Scalar': 'lerp',
    'lerp.Tensor': 'lerp',
    'lgamma.default': 'lgamma',
    'lift_fresh.default': 'masked.std',
    'linalg_vector_norm.default': 'norm',
    'log.default': 'log',
    'log10.default': 'log10',
    'log1p.default': 'log1p',
    'log2.default': 'log2',
    'logaddexp.default': 'logaddexp',
    'logical_and.default': 'logical_and',
    'logical_not.default': 'logical_not',
    'logical_or.default': 'logical_or',
    'logical_xor.default': 'logical_xor',
    'logit.default': 'logit',
    'logsumexp.default': 'logsumexp',
    'lt.Scalar': 'nn.functional.gaussian_nll_loss',
    'lt.Tensor': 'lt',
    'masked_fill.Scalar': 'masked_fill',
    'masked_fill.Tensor': 'masked_fill',
    'max.default': 'max.reduction_no_dim',
    'max.dim': 'max.reduction_with_dim',
    'max_pool2d_with_indices.default': 'max_pool2d_with_indices_backward',
    'max_pool2d_with_indices_backward.default': 'max_pool2d_with_indices_backward',
    'maximum.default': 'maximum',
    'mean.default': 'mean',
    'mean.dim': 'mean',
    'min.default': 'min.reduction_no_dim',
    'min.dim': 'min.reduction_with_dim',
    'minimum.default': 'minimum',
    'mish.default': 'nn.functional.mish',
    'mse_loss.default': 'nn.functional.mse_loss',
    'mul.Scalar': 'cov',
    'mul.Tensor': 'mul',
    'mv.default': 'mv',
    'nan_to_num.default': 'nan_to_num',
    'native_batch_norm.default': 'native_batch_norm',
    'native_dropout_backward.default': 'native_dropout_backward',
    'native_group_norm.default': 'native_group_norm',
    'native_layer_norm.default': 'native_layer_norm',
    'ne.Scalar': 'cov',
    'ne.Tensor': 'ne',
    'neg.default': 'neg',
    'new_empty.default': 'new_empty',
    'new_empty_strided.default': 'new_empty_strided',
    'new_full.default': 'new_full',
    'new_ones.default': 'new_ones',
    'new_zeros.default': 'new_zeros',
    'nll_loss2d_forward.default': 'nn.functional.cross_entropy',
    'nll_loss_forward.default': 'nn.functional.cross_entropy',
    'ones.default': 'ones',
    'ones_like.default': 'ones_like',
    'permute.default': 'permute',
    'pow.Tensor_Scalar': 'nn.functional.gaussian_nll_loss',
    'pow.Tensor_Tensor': 'pow',
    'prod.default': 'prod',
    'prod.dim_int': 'prod',
    'rad2deg.default': 'rad2deg',
    'rand.default': 'nn.functional.fractional_max_pool3d',
    'randn.default': 'randn',
    'randn_like.default': 'randn_like',
    'reciprocal.default': 'reciprocal',
    'relu.default': 'nn.functional.relu',
    'remainder.Scalar': 'take_along_dim',
    'remainder.Tensor': 'remainder',
    'repeat.default': 'repeat',
    'round.default': 'round',
    'rsqrt.default': 'rsqrt',
    'rsub.Scalar': 'signal.windows.bartlett',
    'rsub.Tensor': 'rsub',
    'scalar_tensor.default': 'scalar_tensor',
    'scatter.src': 'scatter',
    'scatter_add.default': 'scatter_add',
    'select.int': 'select',
    'sigmoid.default': 'sigmoid',
    'sign.default': 'sign',
    'signbit.default': 'signbit',
    'silu.default': 'nn.functional.silu',
    'sin.default': 'sin',
    'sinh.default': 'sinh',
    'slice.Tensor': 'slice',
    'smooth_l1_loss.default': 'nn.functional.smooth_l1_loss',
    'softplus.default': 'nn.functional.softplus',
    'split.Tensor': 'split',
    'split_with_sizes.default': 'split_with_sizes',
    'sqrt.default': 'sqrt',
    'squeeze.default': 'squeeze',
    'squeeze.dim': 'squeeze',
    'squeeze.dims': 'squeeze.multiple',
    'stack.default': 'stack',
    'std.correction': 'std',
    'std_mean.correction': 'std_mean',
    'sub.Scalar': 'cov',
    'sub.Tensor': 'sub',
    'sum.default': 'sum',
    'sum.dim_IntList': 'sum',
    't.default': 't',
    'tan.default': 'tan',
    'tanh.default': 'tanh',
    'threshold.default': 'nn.functional.threshold',
    'transpose.int': 'transpose',
    'tril.default': 'tril',
    'triu.default': 'triu',
    'trunc.default': 'trunc',
    'unbind.int': 'unbind',
    'unsqueeze.default': 'unsqueeze',
    'var.correction': 'var',
    'var_mean.correction': 'var_mean',
    'view.default': 'view',
    'where.self': 'where',
    'xlogy.Tensor': 'xlogy',
    'zeros.default': 'zeros',
    'zeros_like.default': 'zeros_like',
}

# decomposed op -> the OpInfo whose backward pass must reach it
BACKWARD = {
    '_adaptive_avg_pool2d_backward.default': 'nn.functional.interpolate.area',
    '_log_softmax_backward_data.default': 'nn.functional.linear_cross_entropy.chunked_none',
    'binary_cross_entropy_backward.default': 'nn.functional.binary_cross_entropy',
    'bitwise_not.default': 'cumprod',
    'elu_backward.default': 'nn.functional.elu',
    'embedding_dense_backward.default': 'nn.functional.embedding',
    'gelu_backward.default': 'nn.functional.gelu',
    'gt.Scalar': 'renorm',
    'hardsigmoid_backward.default': 'nn.functional.hardsigmoid',
    'hardswish_backward.default': 'nn.functional.hardswish',
    'hardtanh_backward.default': 'nn.functional.relu6',
    'huber_loss_backward.default': 'nn.functional.huber_loss',
    'leaky_relu_backward.default': 'nn.functional.leaky_relu',
    'mish_backward.default': 'nn.functional.mish',
    'mse_loss_backward.default': 'nn.functional.mse_loss',
    'native_batch_norm_backward.default': 'native_batch_norm',
    'native_group_norm_backward.default': 'nn.functional.group_norm',
    'native_layer_norm_backward.default': 'native_layer_norm',
    'nll_loss2d_backward.default': 'nn.functional.linear_cross_entropy.chunked_none',
    'log_sigmoid_backward.default': 'nn.functional.logsigmoid',
    'nll_loss_backward.default': 'nn.functional.nll_loss',
    'pow.Scalar': 'ldexp',
    'scatter.value': 'scatter',
    'select_backward.default': 'trapz',
    'sigmoid_backward.default': 'sigmoid',
    'silu_backward.default': 'nn.functional.silu',
    'slice_backward.default': 'trapz',
    'smooth_l1_loss_backward.default': 'nn.functional.smooth_l1_loss',
    'softplus_backward.default': 'nn.functional.softplus',
    'tanh_backward.default': 'tanh',
    'threshold_backward.default': 'nn.functional.relu',
}
