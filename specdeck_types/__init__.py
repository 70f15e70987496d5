"""Value types shared by ``backend/`` and ``state/``, and by domains of ``backend/`` that do not
import each other (a job's ETA: regeneration and training).

Plain dataclasses with no imports from either layer (nor from streamlit), so
both can use them without ``state/`` depending on ``backend/``.
"""
