"""The infrastructure every job uses, none of it the game's: errors a command reports, the
shipped tiny model and configs, where a base model comes from, the published Qwen3 shapes and the
memory plan, sampled-token log-probs, bounded worker processes, and the CPU allocator setting.

It sits on the game's floor and below every job folder; a module here may reach a job folder
only lazily, inside a function (the memory plan reads the adapters' defaults when it runs).
"""
