"""SOUL.md evolution, reviewed: proposals every `soul-update-interval` memory writes, applied on confirm."""
