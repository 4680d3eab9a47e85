"""Billing: price books and invoices (`services`), reads (`selectors`), invoicing, an
invoice's device lines, words and renderings, billing details and periods."""
