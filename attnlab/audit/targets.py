"""What the auditor audits: a name or a class resolved, and a small valid config for any class.

:func:`resolve` turns what a reader types (``llama``, ``LlamaForCausalLM``, ``package.module:Class``)
into a name of :data:`~attnlab.audit.models.MODELS` or a class, and refuses a file path or a hub id
clearly. :func:`small_config` gives any config class small sizes (:data:`SIZES`) and the settings its
family needs beyond them (:data:`FAMILIES`).
"""

from __future__ import annotations

import importlib
import os

from ..i18n import tr
from ..inputs import describe
from .errors import one_line
from .library import require_transformers, transformers
from .models import MODELS

def resolve(target: str):
    """A name of :data:`MODELS`, or a class of ``transformers`` (``LlamaForCausalLM``, ``LlamaConfig``,
    ``transformers.LlamaConfig``, ``package.module:Class``): returns the name or the class. A file path
    or a hub id (``meta-llama/Llama-3-8B``) is a clear error: the auditor builds classes, it reads no
    checkpoint; an import error inside a module is reported as such, not as an unknown model."""
    tf = require_transformers()
    if not isinstance(target, str) or not target.strip():
        raise ValueError(tr("audit.unknown_target", got=describe(target), options=", ".join(MODELS)))
    if target.lower() in MODELS:
        return target.lower()
    looks_like_path = os.sep in target or "/" in target or "\\" in target or os.path.exists(target) \
        or target.endswith((".json", ".py", ".bin", ".safetensors", ".pt", ".gguf"))
    if looks_like_path:
        key = "audit.target_path" if os.path.exists(target) or target.startswith((".", "~")) or \
            target.endswith((".json", ".py", ".bin", ".safetensors", ".pt", ".gguf")) else "audit.target_hub"
        raise ValueError(tr(key, got=target))
    module_name, _, attr = target.rpartition(":") if ":" in target else target.rpartition(".")
    if module_name and module_name != "transformers":
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and (module_name == error.name or module_name.startswith(error.name + ".")):
                raise ValueError(tr("audit.no_module", module=module_name)) from None
            raise ValueError(tr("audit.import_failed", module=module_name, message=one_line(error))) from None
        except Exception as error:  # an error inside the reader's module
            raise ValueError(tr("audit.import_failed", module=module_name, message=one_line(error))) from None
    else:
        module = tf
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ValueError(tr("audit.unknown_target", got=target, options=", ".join(MODELS))) from None
    except Exception as error:  # transformers imports a model's module lazily: its error, in one line
        raise ValueError(tr("audit.import_failed", module=attr, message=one_line(error))) from None
    if isinstance(obj, type) and issubclass(obj, (tf.PreTrainedConfig, tf.PreTrainedModel)):
        return obj
    raise ValueError(tr("audit.unknown_target", got=target, options=", ".join(MODELS)))


SIZES = dict(rotary_dim=8, vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=64, n_embd=32, n_layer=2, n_head=2,
             n_positions=64, d_model=32, d_kv=16, d_ff=64, d_inner=64, num_layers=2, num_heads=2, bos_token_id=0,
             eos_token_id=0, pad_token_id=0, decoder_start_token_id=0,
             # encoder-decoder families: unequal on purpose (a valid config; caches sized by the wrong one crash)
             encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=64, decoder_ffn_dim=64,
             # mixtures of experts: few, small experts
             num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
             n_shared_experts=1, shared_expert_intermediate_size=32, first_k_dense_replace=1,
             # state-space and hybrid layers: a small state
             state_size=8, ssm_state_size=8, mamba_d_state=8, mamba_n_heads=4, mamba_d_head=16, time_step_rank=4,
             conv_kernel=4, mamba_d_conv=4, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16,
             linear_value_head_dim=16, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
             v_head_dim=16,
             # hybrids: at least one attention layer among the two (a stack of only state-space layers is no
             # checkpoint's, and the library's cache code assumes one)
             attn_layer_period=2, attn_layer_offset=1, attn_layer_indices=[1], expert_layer_period=2,
             expert_layer_offset=1)


# Settings per family, on top of SIZES, that make a valid tiny config where the common sizes alone do not
# (the library's message without them is in the comment). Each is said in the audit's notes and on the page.
FAMILIES: dict[str, dict] = {
    # DBRX reads attn_config.rope_theta, which DbrxAttentionConfig does not declare, and clamps by clip_qkv
    "DbrxConfig": dict(attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0)),
    # rope parameters per layer type (KeyError: 'full_attention'); CohereCompassForCausalLM's config is the text
    # config (the key "CohereCompassConfig" before missed it)
    "CohereCompassTextConfig": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # the state-space width matches its heads (4 heads of 16)
    "FalconH1Config": dict(mamba_d_ssm=64),
    # hybrids: one state-space or convolution layer and one attention layer
    "GraniteMoeHybridConfig": dict(layer_types=["mamba", "attention"]),
    "Lfm2MoeConfig": dict(layer_types=["conv", "full_attention"]),
    # two layers cannot share a KV cache across kinds ("The set of layer types producing a cache is different")
    "Gemma3nTextConfig": dict(num_kv_shared_layers=0),
    # Qwen's sparse-attention indexer: every one of its sizes, or none (NoneType // NoneType)
    "Qwen4ExpTextConfig": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=4,
                               indexer_compress_ratio=2),
    # X-MOD's adapters need a language ("Input language unknown")
    "XmodConfig": dict(default_language="en_XX"),
    # sizes the common fields miss (with them left at the defaults the model is full size and the time runs out)
    "Mamba2Config": dict(num_heads=4, head_dim=16, n_groups=1),  # 4 heads of 16 = expand 2 x hidden 32
    "GPTNeoConfig": dict(num_layers=2, attention_types=[[["global", "local"], 1]], window_size=4),
    "ProphetNetConfig": dict(num_encoder_layers=1, num_decoder_layers=2, num_encoder_attention_heads=2,
                             num_decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64),
    # Longformer's window: 4 tokens, not 512 ("size of tensor a (16) must match b (512)")
    "LEDConfig": dict(attention_window=4),
    # Zamba2's shared blocks at the layer that exists (its default ids start at layer 6: KeyError: 1)
    "Zamba2Config": dict(hybrid_layer_ids=[1]),
    # Zamba ties its shared transformer block across the hybrid layers: with one hybrid layer there is nothing to
    # tie it to ("There is an issue with your definition of `tie_weights_keys`"); two hybrid layers
    "ZambaConfig": dict(layer_types=["linear_attention", "hybrid", "hybrid"], num_hidden_layers=3),
    # its linear-attention layers have their own sizes (32 heads of 128 by default: minutes per audit)
    "KimiLinearConfig": dict(linear_num_heads=2, linear_head_dim=16),
    # MiMo-V2-Flash with 2 heads of 2 key-value heads fails in its attention sinks ("size of tensor a (2) must
    # match the size of tensor b (0)"); the checkpoint's ratio, several query heads per key-value head, runs
    "MiMoV2FlashConfig": dict(num_attention_heads=4, num_key_value_heads=1),
    # Blt: four sub-configs (patcher, local encoder and decoder, global transformer) and hash embeddings of
    # 500002 rows each; with the defaults one audit takes minutes. Every part small, its global width the same
    "BltConfig": dict(encoder_hash_byte_group_vocab=64,
                      **{part: dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                    num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                                    **({"hidden_size_global": 32} if part in ("encoder_config", "decoder_config")
                                       else {}))
                         for part in ("patcher_config", "encoder_config", "decoder_config", "global_config")}),
    # Reformer: axial positions whose shape multiplies to 64 and whose widths add to 32, local attention only
    "ReformerConfig": dict(axial_pos_shape=[8, 8], axial_pos_embds_dim=[16, 16], attn_layers=["local", "local"],
                           local_attn_chunk_length=4),
    # Dory: one layer per stage (input, recurrent, output); with the defaults 8 + 8 of 2 layers the recurrent
    # stage has -28 layers and the crash proves nothing
    "DoryConfig": dict(num_hidden_layers=3, n_input_layers=1, n_recurrent_layers=1, n_output_layers=1,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    # XLNet reads ahead unless told to be unidirectional (its own causal setting; the default "bi" is bidirectional)
    "XLNetConfig": dict(attn_type="uni"),
    # MusicGen as a text model: one codebook ("shape '[-1, 4, 8]' is invalid")
    "MusicgenDecoderConfig": dict(num_codebooks=1),
    "MusicgenMelodyDecoderConfig": dict(num_codebooks=1),
}


for _names, _settings in (
        # multi-head latent attention: the rotary part of a head is head_dim ("size of tensor a (4) must match b (8)")
        (("DeepseekV3Config", "AXK1Config", "LongcatFlashConfig", "YoutuConfig"), dict(head_dim=8)),
        # grouped expert routing: one group of the 4 experts ("shape '[-1, 8, 0]' is invalid")
        (("DeepseekV3Config", "AXK1Config", "DeepseekV32Config", "BailingHybridConfig"), dict(n_group=1, topk_group=1))):
    for _name in _names:
        FAMILIES.setdefault(_name, {}).update(_settings)


def family_settings(config_class) -> dict:
    """The settings :data:`FAMILIES` gives ``config_class`` (by its name), ``{}`` for most."""
    return dict(FAMILIES.get(getattr(config_class, "__name__", ""), {}))


def _has(config, key: str) -> bool:
    """``hasattr`` that also says no where the config refuses a global read (a per-layer attribute)."""
    try:
        getattr(config, key)
        return True
    except Exception:
        return False


def small_config(config_class, extra: dict | None = None):
    """``config_class`` with small sizes for whichever of the common size fields it has (:data:`SIZES`),
    a per-layer pattern (``layer_types``) cut to one layer of each kind it lists, small sub-configs
    (``text_config`` of a multimodal model), and the family's own settings (:data:`FAMILIES`, or ``extra``).
    Sizes the class rejects are left at their defaults."""
    defaults = config_class()
    family = family_settings(config_class) if extra is None else dict(extra)
    sizes = {k: v for k, v in SIZES.items() if _has(defaults, k)}
    if "encoder_layers" in sizes:
        sizes.pop("num_hidden_layers", None)  # an alias of encoder_layers in BART's family
    for pattern in ("layer_types", "block_types"):  # RecurrentGemma: block_types
        kinds = getattr(defaults, pattern, None)
        if pattern not in family and isinstance(kinds, (list, tuple)) and kinds and all(isinstance(k, str) for k in kinds):
            distinct = list(dict.fromkeys(kinds))
            sizes[pattern] = distinct if len(distinct) > 1 else distinct * 2
            sizes["num_hidden_layers"] = len(sizes[pattern])
    for key in ("text_config", "decoder_config", "vision_config", "audio_config", "speech_config"):
        sub = getattr(defaults, key, None)
        if isinstance(sub, transformers.PreTrainedConfig) and key not in family:
            try:
                sizes[key] = small_config(type(sub)).to_dict()
            except Exception:
                pass
    sizes.update(family)
    singles = tuple((k,) for k in sizes if k not in family)  # one size the class refuses (XLNet: a length bound)
    for drop in ((), ("layer_types",), *singles, tuple(k for k in sizes if k not in family and k not in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "max_position_embeddings", "n_embd", "n_layer", "n_head", "n_positions", "d_model", "num_layers"))):
        try:
            return config_class(**{k: v for k, v in sizes.items() if k not in drop})
        except Exception:
            continue
    return defaults
