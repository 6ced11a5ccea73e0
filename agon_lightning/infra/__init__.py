"""The infrastructure every job uses, none of it the game's: errors a command reports, the
shipped tiny model and configs, where a base model comes from, the published Qwen3 shapes and the
memory plan, sampled-token log-probs, bounded worker processes, the CPU allocator setting, and a
package's public names loaded on first use.

It sits on the game's floor and below every job folder and component, and imports none of them,
not even inside a function: what a job folder and a module here both need lives here
(:func:`~agon_lightning.infra.model_source.resolve_model_path`).
"""
