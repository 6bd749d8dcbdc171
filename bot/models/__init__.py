"""The models: each provider's client behind one seam, the fallback chain per role, usage and cost.

Anthropic (`brain`) and OpenAI-compatible servers (`openai_brain`), chosen per role by `providers`;
voice notes are transcribed here too. The SDKs are imported only when a model is called.
"""
