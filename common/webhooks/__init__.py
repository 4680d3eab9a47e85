"""The rules' webhook call, a signed JSON POST (`delivery`), and where a
tenant's webhook may go (`destinations`)."""
