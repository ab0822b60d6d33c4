"""The zoo's catalogue: every model as its library's users build it.

Each entry is a Spec: a name (library.model[.generate_*]), a build function
returning (model, args) and what to compare. Builds run under
torch.manual_seed(0) (the harness seeds before each), with random weights
(no hub: HF_HUB_OFFLINE=1, transformers models from small configs), the
model in eval mode, batch 2 and the smallest input the model takes
(64x64 for most CNNs; 224 only where the architecture fixes it).

Nothing here imports a model library at import time: the catalogue is read
by the test process (names only) and built in the worker.
"""
import dataclasses
from typing import Callable

# Tolerances for float outputs, elementwise:
# |kiln - eager| <= ATOL * max(1, max|eager|) + RTOL * |eager|
# (kiln's kernels and torch's add and fuse in different orders; a few hundred
# to a few thousand products per output through up to ~150 layers). ATOL is
# scaled by the tensor's largest magnitude when that is above 1: with random
# weights some CNNs' logits reach 1e4 to 1e8 (torchvision's resnet101,
# inception_v3), where float32 cancellation leaves a small logit beside
# large ones with a relative error of 1e-2 while every difference stays
# within 1e-6 of the largest logit (harness.compare).
RTOL = 1e-3
ATOL = 1e-4

BATCH = 2
NEW_TOKENS = 16


@dataclasses.dataclass
class Spec:
    name: str                      # "torchvision.resnet18", "transformers.gpt2.generate_greedy"
    library: str                   # torchvision | timm | transformers
    build: Callable                # () -> (model, args): args passed positionally
    kind: str = "forward"          # "forward": model(*args); "generate": model.generate(*args, ...)
    generate: str = None           # kind "generate": "greedy" or "sample" (generate_kwargs)
    rtol: float = RTOL
    atol: float = ATOL


SPECS = {}


def _add(spec):
    assert spec.name not in SPECS, spec.name
    SPECS[spec.name] = spec


def _image(size, channels=3):
    import torch
    return torch.randn(BATCH, channels, size, size)


# ------------------------------------------------------------- torchvision

# Every classification constructor of torchvision.models
# (torchvision.models.list_models(module=torchvision.models), 80 in 0.28);
# test_zoo checks this list against the installed torchvision. Input size:
# 64 unless the model needs more. Vision transformers fix their input size at
# construction (image_size, a constructor argument): 64 for /16 and /32
# patches, 112 for /14. inception_v3 needs at least 75 (80 used); maxvit_t
# needs 224 (its partitions of 7 at every stage).
TORCHVISION = [
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "efficientnet_b5", "efficientnet_b6", "efficientnet_b7",
    "efficientnet_v2_l", "efficientnet_v2_m", "efficientnet_v2_s",
    "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
    "regnet_x_16gf", "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf",
    "regnet_x_800mf", "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf",
    "regnet_y_400mf", "regnet_y_800mf", "regnet_y_8gf",
    "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1",
    "swin_b", "swin_s", "swin_t", "swin_v2_b", "swin_v2_s", "swin_v2_t",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32",
    "wide_resnet101_2", "wide_resnet50_2",
]

_TV_SIZE = {"inception_v3": 80, "maxvit_t": 224}
_TV_KWARGS = {
    # googlenet and inception_v3 warn unless init_weights is given; True is
    # their documented default (truncated-normal init, as before).
    "googlenet": {"init_weights": True},
    "inception_v3": {"init_weights": True},
    "vit_b_16": {"image_size": 64}, "vit_b_32": {"image_size": 64},
    "vit_l_16": {"image_size": 64}, "vit_l_32": {"image_size": 64},
    "vit_h_14": {"image_size": 112},
}


def _torchvision(name):
    def build():
        import torchvision
        kwargs = _TV_KWARGS.get(name, {})
        model = torchvision.models.get_model(name, weights=None, **kwargs).eval()
        size = kwargs.get("image_size", _TV_SIZE.get(name, 64))
        return model, (_image(size),)
    return build


for _n in TORCHVISION:
    _add(Spec(f"torchvision.{_n}", "torchvision", _torchvision(_n)))


# -------------------------------------------------------------------- timm

# (name, family, create_model kwargs, input size). img_size is timm's own
# create_model argument for models whose position embeddings or windows
# depend on the input size.
_IMG64 = {"img_size": 64}
TIMM = [
    # ResNet and variants
    ("resnet18", "resnet", {}, 64),
    ("resnet26d", "resnet", {}, 64),
    ("resnet50", "resnet", {}, 64),
    ("resnext26ts", "resnet", {}, 64),
    ("seresnext26d_32x4d", "resnet", {}, 64),
    ("resnetv2_18", "resnetv2", {}, 64),
    ("res2net50_14w_8s", "res2net", {}, 64),
    ("resnest14d", "resnest", {}, 64),
    ("skresnet18", "sknet", {}, 64),
    ("nf_resnet26", "nfnet", {}, 64),
    # EfficientNet and mobile nets
    ("efficientnet_b0", "efficientnet", {}, 64),
    ("tf_efficientnet_b0", "efficientnet", {}, 64),  # TF 'SAME' padding
    ("efficientnetv2_rw_t", "efficientnet", {}, 64),
    ("mobilenetv2_050", "mobilenetv2", {}, 64),
    ("mobilenetv3_small_100", "mobilenetv3", {}, 64),
    ("mobilenetv3_large_100", "mobilenetv3", {}, 64),
    ("mobilenetv4_conv_small", "mobilenetv4", {}, 64),
    ("ghostnet_100", "ghostnet", {}, 64),
    ("rexnet_100", "rexnet", {}, 64),
    ("repvgg_a0", "byobnet", {}, 64),
    # RegNet
    ("regnetx_002", "regnet", {}, 64),
    ("regnety_002", "regnet", {}, 64),
    ("regnetz_005", "byobnet", {}, 64),
    # ConvNeXt and descendants
    ("convnext_atto", "convnext", {}, 64),
    ("convnextv2_atto", "convnext", {}, 64),
    ("inception_next_tiny", "inception_next", {}, 64),
    # ViT, DeiT and other plain transformers
    ("vit_tiny_patch16_224", "vit", _IMG64, 64),
    ("deit_tiny_patch16_224", "deit", _IMG64, 64),
    ("deit_tiny_distilled_patch16_224", "deit", _IMG64, 64),
    ("eva02_tiny_patch14_224", "eva", _IMG64, 64),
    ("beit_base_patch16_224", "beit", _IMG64, 64),
    ("xcit_nano_12_p16_224", "xcit", {}, 64),
    ("pit_ti_224", "pit", _IMG64, 64),
    # hierarchical transformers
    ("swin_tiny_patch4_window7_224", "swin", _IMG64, 64),
    ("swinv2_cr_tiny_ns_224", "swin", _IMG64, 64),
    ("focalnet_tiny_srf", "focalnet", {}, 64),
    ("pvt_v2_b0", "pvt_v2", {}, 64),
    # LeViT, hybrids and efficient attention
    ("levit_128s", "levit", _IMG64, 64),
    ("mobilevit_xxs", "mobilevit", {}, 64),
    ("efficientformer_l1", "efficientformer", {}, 224),  # its attention biases fix 224
    ("edgenext_xx_small", "edgenext", {}, 64),
    ("fastvit_t8", "fastvit", {}, 64),
    ("maxvit_rmlp_pico_rw_256", "maxxvit", _IMG64, 64),
    ("coatnet_nano_rw_224", "maxxvit", _IMG64, 64),
    ("tiny_vit_5m_224", "tiny_vit", {}, 64),
    ("efficientvit_b0", "efficientvit", {}, 64),
    ("botnet26t_256", "byoanet", _IMG64, 64),
    # MLPs
    ("mixer_s32_224", "mlp_mixer", _IMG64, 64),
    ("resmlp_12_224", "mlp_mixer", _IMG64, 64),
    ("gmlp_ti16_224", "mlp_mixer", _IMG64, 64),
    ("sequencer2d_s", "sequencer", {}, 64),  # LSTMs
    # other CNN families
    ("densenet121", "densenet", {}, 64),
    ("dla46_c", "dla", {}, 64),
    ("hrnet_w18_small", "hrnet", {}, 64),
    ("cs3darknet_s", "cspnet", {}, 64),
    ("ese_vovnet19b_dw", "vovnet", {}, 64),
    ("poolformer_s12", "metaformer", {}, 64),
    ("xception41", "xception", {}, 64),
    ("inception_v3", "inception", {}, 80),
]


def _timm(name, kwargs, size):
    def build():
        import timm
        model = timm.create_model(name, pretrained=False, **kwargs).eval()
        return model, (_image(size),)
    return build


for _n, _family, _kw, _size in TIMM:
    _add(Spec(f"timm.{_n}", "timm", _timm(_n, _kw, _size)))


# ------------------------------------------------------------ transformers

VOCAB = 1024
SEQ = 16          # forward: input_ids of (2, 16)
PROMPT = 8        # generate: prompts of (2, 8), 16 new tokens

# Small configs: 2 layers, hidden 64, 2 or 4 heads, vocabulary 1024.
_LLAMA_LIKE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
_BERT_LIKE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=2, max_position_embeddings=128)
_BART_LIKE = dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                  decoder_ffn_dim=128, max_position_embeddings=128)
_VISION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
               image_size=32, patch_size=8)

# (name, config class, config kwargs, auto class, inputs, generate?)
# inputs: "text" (input_ids), "seq2seq" (input_ids, None, decoder_input_ids:
# forward's positional order), "pixels" (pixel_values (2, 3, 32, 32), or 64
# where the config's image_size says so).
TRANSFORMERS = [
    # decoders (causal LMs: also generate(), greedy and sampled)
    ("gpt2", "GPT2Config", dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=128),
     "AutoModelForCausalLM", "text", True),
    ("llama", "LlamaConfig", _LLAMA_LIKE, "AutoModelForCausalLM", "text", True),
    ("mistral", "MistralConfig", dict(_LLAMA_LIKE, sliding_window=64), "AutoModelForCausalLM", "text", True),
    ("qwen2", "Qwen2Config", _LLAMA_LIKE, "AutoModelForCausalLM", "text", True),
    ("gemma", "GemmaConfig", dict(_LLAMA_LIKE, head_dim=16), "AutoModelForCausalLM", "text", True),
    ("phi", "PhiConfig", dict(_LLAMA_LIKE, num_key_value_heads=4), "AutoModelForCausalLM", "text", True),
    ("phi3", "Phi3Config", dict(_LLAMA_LIKE, pad_token_id=0), "AutoModelForCausalLM", "text", True),
    ("falcon", "FalconConfig", dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4),
     "AutoModelForCausalLM", "text", True),
    ("opt", "OPTConfig", dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                              num_attention_heads=2, max_position_embeddings=128, word_embed_proj_dim=64),
     "AutoModelForCausalLM", "text", True),
    ("gpt_neo", "GPTNeoConfig", dict(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=2,
                                     attention_types=[[["global", "local"], 1]], max_position_embeddings=128,
                                     window_size=8),
     "AutoModelForCausalLM", "text", True),
    ("gpt_neox", "GPTNeoXConfig", dict(_BERT_LIKE, num_attention_heads=4),
     "AutoModelForCausalLM", "text", True),
    ("bloom", "BloomConfig", dict(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4),
     "AutoModelForCausalLM", "text", True),
    ("gpt_bigcode", "GPTBigCodeConfig", dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=128),
     "AutoModelForCausalLM", "text", False),
    ("starcoder2", "Starcoder2Config", _LLAMA_LIKE, "AutoModelForCausalLM", "text", False),
    # encoders
    ("bert", "BertConfig", _BERT_LIKE, "AutoModel", "text", False),
    ("roberta", "RobertaConfig", dict(_BERT_LIKE, max_position_embeddings=130), "AutoModel", "text", False),
    ("distilbert", "DistilBertConfig", dict(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
                                            max_position_embeddings=128),
     "AutoModel", "text", False),
    ("albert", "AlbertConfig", dict(_BERT_LIKE, embedding_size=32), "AutoModel", "text", False),
    ("electra", "ElectraConfig", dict(_BERT_LIKE, embedding_size=32), "AutoModel", "text", False),
    ("deberta_v2", "DebertaV2Config", _BERT_LIKE, "AutoModel", "text", False),
    ("mobilebert", "MobileBertConfig", dict(_BERT_LIKE, embedding_size=32, intra_bottleneck_size=32,
                                            num_feedforward_networks=2, true_hidden_size=32),
     "AutoModel", "text", False),
    # encoder-decoders
    ("t5", "T5Config", dict(vocab_size=VOCAB, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_decoder_layers=2,
                            num_heads=2),
     "AutoModelForSeq2SeqLM", "seq2seq", False),
    ("bart", "BartConfig", _BART_LIKE, "AutoModelForSeq2SeqLM", "seq2seq", False),
    ("marian", "MarianConfig", dict(_BART_LIKE, decoder_start_token_id=0, pad_token_id=0),
     "AutoModelForSeq2SeqLM", "seq2seq", False),
    # vision transformers and CNNs
    ("vit", "ViTConfig", _VISION, "AutoModel", "pixels", False),
    ("deit", "DeiTConfig", _VISION, "AutoModel", "pixels", False),
    ("dinov2", "Dinov2Config", _VISION, "AutoModel", "pixels", False),
    ("swin", "SwinConfig", dict(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                window_size=4),
     "AutoModel", "pixels", False),
    ("convnext", "ConvNextConfig", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], image_size=64),
     "AutoModel", "pixels", False),
    ("resnet", "ResNetConfig", dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                    layer_type="basic", image_size=64),
     "AutoModel", "pixels", False),
]


def _hf_config(config_name, kwargs):
    """The config, with special token ids that a default config puts past
    the small vocabulary (GPT-2's 50256, ...) brought inside it."""
    import transformers
    cls = getattr(transformers, config_name)
    config = cls(**kwargs)
    inside = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "decoder_start_token_id": 0}
    fix = {k: v for k, v in inside.items()
           if k not in kwargs and isinstance(getattr(config, k, None), int) and getattr(config, k) >= VOCAB}
    return cls(**kwargs, **fix) if fix else config


def _hf_model(auto, config):
    import transformers
    return getattr(transformers, auto).from_config(config).eval()


def _hf(config_name, kwargs, auto, inputs):
    def build():
        import torch
        config = _hf_config(config_name, kwargs)
        model = _hf_model(auto, config)
        if inputs == "pixels":
            return model, (_image(getattr(config, "image_size", 32), getattr(config, "num_channels", 3)),)
        ids = torch.randint(0, VOCAB, (BATCH, SEQ))
        if inputs == "seq2seq":
            return model, (ids, None, torch.randint(0, VOCAB, (BATCH, SEQ // 2)))
        return model, (ids,)
    return build


def _hf_generate(config_name, kwargs):
    def build():
        import torch
        config = _hf_config(config_name, kwargs)
        model = _hf_model("AutoModelForCausalLM", config)
        # Exactly NEW_TOKENS: no end of sequence, no padding to infer a mask from.
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        return model, (torch.randint(1, VOCAB, (BATCH, PROMPT)),)
    return build


def generate_kwargs(mode):
    """generate()'s keyword arguments: 16 new tokens with the KV cache,
    greedy or sampled (the harness seeds before each generate call)."""
    import torch
    sample = mode == "sample"
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=sample, use_cache=True)
    if sample:
        kwargs.update(top_k=50, top_p=0.95, temperature=1.0)
    kwargs["attention_mask"] = torch.ones(BATCH, PROMPT, dtype=torch.long)
    return kwargs


for _n, _cfg, _kw, _auto, _inputs, _gen in TRANSFORMERS:
    _add(Spec(f"transformers.{_n}", "transformers", _hf(_cfg, _kw, _auto, _inputs)))
    if _gen:
        for _mode in ("greedy", "sample"):
            _add(Spec(f"transformers.{_n}.generate_{_mode}", "transformers", _hf_generate(_cfg, _kw),
                      kind="generate", generate=_mode))

del _n

# The fast tier of the backend mode (torch.compile(model, backend="kiln"),
# test_zoo_backend_quick in `make test`): a handful across the three
# libraries, chosen for Dynamo's capture being quick (a few seconds each)
# while covering convolutions with batch norm, attention, a KV cache through
# generate(), and ops kiln runs as torch eager. The whole zoo runs in the
# full tier (test_zoo_backend, `make zoo`).
BACKEND_QUICK = [
    "torchvision.resnet18", "torchvision.mobilenet_v3_small",
    "timm.vit_tiny_patch16_224", "timm.convnext_atto",
    "transformers.gpt2", "transformers.bert", "transformers.gpt2.generate_greedy",
]
