"""The billing job: usage log (Parquet) + price books → invoices. Imports only `common`."""
