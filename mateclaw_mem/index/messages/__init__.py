"""The Add/Search message index (`messages.db`): storage, per-owner views, ranking; `index.MessageIndex`
composes them."""
