"""The `mateclaw-mem` command. Thin: parse, call a service, render. Imports are lazy."""
