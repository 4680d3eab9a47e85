"""What a tenant is charged: billed message units per packet (`metering`) and
price books and invoices (`pricing`)."""
