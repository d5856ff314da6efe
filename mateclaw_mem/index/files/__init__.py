"""The workspace file index (`index.db`): storage, ingest, queries; `index.FileIndex` composes them."""
