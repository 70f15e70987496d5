"""Value types shared by ``backend/`` and ``state/``.

Plain dataclasses with no imports from either layer (nor from streamlit), so
both can use them without ``state/`` depending on ``backend/``.
"""
