"""Context: what the model sees for one turn — assembly, window defense, recall, token estimates."""
