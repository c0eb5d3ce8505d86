"""Data in and out of a store: import (three formats), export (JSONL or Markdown), backup."""
